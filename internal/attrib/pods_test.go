package attrib

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParsePodLogDir(t *testing.T) {
	tests := []struct {
		name string
		want Pod
		ok   bool
	}{
		{"ml-team_llama-finetune-0_0a1b2c3d-4e5f-6789-abcd-ef0123456789",
			Pod{Namespace: "ml-team", Name: "llama-finetune-0", UID: "0a1b2c3d-4e5f-6789-abcd-ef0123456789"}, true},
		{"default_web.v2-abc_0A1B2C3D-4E5F-6789-ABCD-EF0123456789",
			Pod{Namespace: "default", Name: "web.v2-abc", UID: "0a1b2c3d-4e5f-6789-abcd-ef0123456789"}, true},
		{"kube-system_etcd-node1_5e2b7c0d9f3a41e6b8c4d2a0f1e3b5c7",
			Pod{Namespace: "kube-system", Name: "etcd-node1", UID: "5e2b7c0d9f3a41e6b8c4d2a0f1e3b5c7"}, true},
		{"0a1b2c3d-4e5f-6789-abcd-ef0123456789", Pod{}, false},        // an older kubelet: the UID alone
		{"ns_pod_0a1b2c3d-4e5f-6789-abcd-ef012345678", Pod{}, false},  // UID one digit short
		{"ns_pod_0a1b2c3d_4e5f_6789_abcd_ef0123456789", Pod{}, false}, // five fields
		{"ns_pod_0a1b2c3dx4e5f-6789-abcd-ef0123456789", Pod{}, false}, // no dash where one must be
		{"_pod_0a1b2c3d-4e5f-6789-abcd-ef0123456789", Pod{}, false},   // no namespace
		{"ns__0a1b2c3d-4e5f-6789-abcd-ef0123456789", Pod{}, false},    // no name
		{"ns_pod_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", Pod{}, false},     // 32 characters, not hex
		{"", Pod{}, false},
	}
	for _, tt := range tests {
		got, ok := ParsePodLogDir(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParsePodLogDir(%q) = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// TestPodIndexFollowsTheDirectory: UIDs are found whichever way the cgroup
// writes them; a pod that appears later is found once the directory changed
// (or MinRescan passed) without reading it on every lookup; a pod whose
// directory is gone is forgotten.
func TestPodIndexFollowsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	mkdir := func(name string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, name, "c"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	setMtime := func(mt time.Time) {
		t.Helper()
		if err := os.Chtimes(dir, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	const a = "0a1b2c3d-4e5f-6789-abcd-ef0123456789"
	const b = "11111111-2222-3333-4444-555555555555"
	mkdir("ml_trainer-0_" + a)
	if err := os.WriteFile(filepath.Join(dir, "ml_not-a-dir_"+b), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	setMtime(t0)
	now := t0
	x := &PodIndex{Dir: dir, MinRescan: time.Minute, Now: func() time.Time { return now }}

	for _, uid := range []string{a, "0a1b2c3d_4e5f_6789_abcd_ef0123456789", "0A1B2C3D-4E5F-6789-ABCD-EF0123456789"} {
		if p, ok := x.Lookup(uid); !ok || p.Namespace != "ml" || p.Name != "trainer-0" || p.UID != a {
			t.Errorf("Lookup(%s) = %+v, %v", uid, p, ok)
		}
	}
	if _, ok := x.Lookup(b); ok {
		t.Error("a plain file counted as a pod's directory")
	}

	// A new pod directory the index has not read: with the directory's
	// mtime unchanged it is not read again before MinRescan...
	mkdir("ml_trainer-1_" + b)
	setMtime(t0)
	scanned := x.scanned
	if _, ok := x.Lookup(b); ok || x.scanned != scanned {
		t.Errorf("read an unchanged directory again within MinRescan (found %v)", ok)
	}
	// ...but is once its mtime changed.
	setMtime(t0.Add(time.Second))
	if p, ok := x.Lookup(b); !ok || p.Name != "trainer-1" {
		t.Errorf("new pod after the directory changed: %+v, %v", p, ok)
	}

	// Gone from the directory: forgotten at the next read.
	if err := os.RemoveAll(filepath.Join(dir, "ml_trainer-0_"+a)); err != nil {
		t.Fatal(err)
	}
	setMtime(t0.Add(time.Second))
	now = now.Add(time.Minute)
	if _, ok := x.Lookup("22222222-2222-3333-4444-555555555555"); ok {
		t.Error("found a pod that never was")
	}
	if _, ok := x.Lookup(a); ok {
		t.Error("a pod whose directory is gone is still known")
	}

	var nilIndex *PodIndex
	if _, ok := nilIndex.Lookup(a); ok {
		t.Error("a nil index knows a pod")
	}
	if _, ok := NewPodIndex(filepath.Join(dir, "missing")).Lookup(a); ok {
		t.Error("a missing directory knows a pod")
	}
}

func TestPodLogDir(t *testing.T) {
	if got := PodLogDir(""); got != "/var/log/pods" {
		t.Errorf("PodLogDir(\"\") = %q", got)
	}
	if got := PodLogDir("/fx"); got != "/fx/var/log/pods" {
		t.Errorf("PodLogDir(/fx) = %q", got)
	}
}

func TestPodRef(t *testing.T) {
	tests := []struct {
		c    Context
		want string
	}{
		{Context{PodUID: "0a1b2c3d-4e5f-6789-abcd-ef0123456789", Namespace: "ml", PodName: "trainer-0"}, "ml/trainer-0"},
		{Context{PodUID: "0a1b2c3d-4e5f-6789-abcd-ef0123456789"}, "0a1b2c3d"},
		{Context{ContainerID: "4c5b"}, ""},
	}
	for _, tt := range tests {
		if got := tt.c.PodRef(); got != tt.want {
			t.Errorf("%+v.PodRef() = %q, want %q", tt.c, got, tt.want)
		}
	}
}
