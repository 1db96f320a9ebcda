package main

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/probe"
)

func TestRepositoryDockerfile(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	instrs, err := parseDockerfile(b)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := evalDockerfile(instrs, map[string]string{"TARGETARCH": "arm64", "VERSION": "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Copies) != 1 || spec.Copies[0].src != "dist/linux-arm64/vramguard" || spec.Copies[0].dst != "/usr/bin/vramguard" {
		t.Errorf("COPY: %+v", spec.Copies)
	}
	if spec.User != "65532:65532" || !slices.Equal(spec.Entrypoint, []string{"/usr/bin/vramguard"}) || spec.Cmd[0] != "serve" {
		t.Errorf("user %q entrypoint %q cmd %q", spec.User, spec.Entrypoint, spec.Cmd)
	}
	if spec.Labels["org.opencontainers.image.version"] != "1.2.3" || !strings.Contains(spec.Base, "distroless/base") {
		t.Errorf("labels %v base %q", spec.Labels, spec.Base)
	}
	// The DaemonSet runs the image's own command as its user.
	uid, _, err := resolveUser(spec.User, passwd, group)
	if err != nil || uid != 65532 {
		t.Fatalf("USER: %d %v", uid, err)
	}
	if err := checkManifest("../../deploy/kubernetes/vramguard.yaml", spec, uid); err != nil {
		t.Error(err)
	}
	spec.Cmd = append(spec.Cmd, "--verbose")
	if err := checkManifest("../../deploy/kubernetes/vramguard.yaml", spec, uid); err == nil {
		t.Error("a manifest whose args differ from CMD passed")
	}
}

func TestDockerfileRefusals(t *testing.T) {
	for _, tt := range []struct{ name, file, want string }{
		{"run", "FROM x\nRUN apt-get install y\n", "RUN"},
		{"shell form", "FROM x\nENTRYPOINT /usr/bin/vramguard serve\n", "exec form"},
		{"two stages", "FROM x AS a\nFROM y\n", "one image"},
		{"second FROM", "FROM x\nENTRYPOINT [\"a\"]\nFROM y\n", "second stage"},
		{"undefined", "FROM x\nCOPY dist/linux-${ARCH}/vramguard /usr/bin/\nENTRYPOINT [\"a\"]\n", "$ARCH is not defined"},
		{"copy flags", "FROM x\nCOPY --chmod=0755 a /b\nENTRYPOINT [\"a\"]\n", "COPY flags"},
		{"no entrypoint", "FROM x\n", "no ENTRYPOINT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			instrs, err := parseDockerfile([]byte(tt.file))
			if err == nil {
				_, err = evalDockerfile(instrs, nil)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

func TestDockerfileArgsAndContinuations(t *testing.T) {
	file := "# syntax=docker/dockerfile:1\nARG BASE=img:1\nFROM ${BASE}\nARG TARGETARCH\nARG VERSION=unknown\n" +
		"LABEL a=\"x y\" \\\n  # a comment inside\n  b=\"${VERSION}\"\nCOPY dist/linux-$TARGETARCH/vramguard /usr/bin/\n" +
		"ENTRYPOINT [\"/usr/bin/vramguard\"]\n"
	instrs, err := parseDockerfile([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := evalDockerfile(instrs, map[string]string{"TARGETARCH": "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Base != "img:1" || spec.Labels["a"] != "x y" || spec.Labels["b"] != "unknown" {
		t.Errorf("base %q labels %v", spec.Base, spec.Labels)
	}
	if len(spec.Copies) != 1 || spec.Copies[0].src != "dist/linux-amd64/vramguard" || spec.Copies[0].dst != "/usr/bin/vramguard" {
		t.Errorf("copies %+v", spec.Copies)
	}
}

func TestRepositoryDockerignore(t *testing.T) {
	ig, err := readDockerignore("../..")
	if err != nil {
		t.Fatal(err)
	}
	for p, out := range map[string]bool{
		"dist/linux-amd64/vramguard": false,
		"dist/linux-arm64/vramguard": false,
		"dist/SHA256SUMS":            true,
		"go.mod":                     true,
		"internal/cli/root.go":       true,
		".git/config":                true,
	} {
		if ig.excluded(p) != out {
			t.Errorf("%s: excluded %v, want %v", p, !out, out)
		}
	}
}

func TestWheelContents(t *testing.T) {
	bin := []byte("\x7fELF not really")
	name, whl, err := buildWheel("1.2.3.dev4+gabc", "manylinux_2_34_x86_64", bin, []byte("# readme\n"), time.Date(2020, 1, 2, 3, 4, 6, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if name != "vramguard-1.2.3.dev4+gabc-py3-none-manylinux_2_34_x86_64.whl" {
		t.Errorf("name %q", name)
	}
	zr, err := zip.NewReader(bytes.NewReader(whl), int64(len(whl)))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	var order []string
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		files[f.Name] = b
		order = append(order, f.Name)
		if f.Name == "vramguard-1.2.3.dev4+gabc.data/scripts/vramguard" && f.Mode().Perm() != 0o755 {
			t.Errorf("the binary's mode is %v, want 0755 (pip makes it executable from this)", f.Mode())
		}
	}
	di := "vramguard-1.2.3.dev4+gabc.dist-info/"
	if order[len(order)-1] != di+"RECORD" {
		t.Errorf("RECORD is not last: %v", order)
	}
	// Both Python trees are the embedded probe, byte for byte.
	for n, b := range probe.Files() {
		if strings.HasPrefix(n, "vramguard/") && !bytes.Equal(files[n], b) {
			t.Errorf("%s differs from the embedded probe", n)
		}
		if !bytes.Equal(files[probe.PackagedDir+"/"+n], b) {
			t.Errorf("%s/%s differs from the embedded probe", probe.PackagedDir, n)
		}
	}
	if !bytes.Equal(files["vramguard-1.2.3.dev4+gabc.data/scripts/vramguard"], bin) {
		t.Error("the binary is not in .data/scripts")
	}
	if !strings.Contains(string(files[di+"WHEEL"]), "\nRoot-Is-Purelib: false\nTag: py3-none-manylinux_2_34_x86_64\n") {
		t.Errorf("WHEEL:\n%s", files[di+"WHEEL"])
	}
	meta := string(files[di+"METADATA"])
	if !strings.HasPrefix(meta, "Metadata-Version: 2.1\nName: vramguard\nVersion: 1.2.3.dev4+gabc\n") || !strings.HasSuffix(meta, "\n\n# readme\n") {
		t.Errorf("METADATA:\n%s", meta)
	}
	// RECORD lists every other file with its hash and size.
	lines := strings.Split(strings.TrimSpace(string(files[di+"RECORD"])), "\n")
	if len(lines) != len(files) {
		t.Errorf("RECORD has %d lines for %d files", len(lines), len(files))
	}
	for _, l := range lines {
		f := strings.Split(l, ",")
		if len(f) != 3 {
			t.Fatalf("RECORD line %q", l)
		}
		if f[0] == di+"RECORD" {
			if f[1] != "" || f[2] != "" {
				t.Errorf("RECORD's own line %q", l)
			}
			continue
		}
		b, ok := files[f[0]]
		if !ok || f[1] != wheelRecordHash(b) || f[2] != strconv.Itoa(len(b)) {
			t.Errorf("RECORD line %q does not match the file", l)
		}
	}
	if _, _, err := buildWheel("1.2.3-dev", "manylinux_2_34_x86_64", bin, nil, time.Now()); err == nil {
		t.Error("a non-PEP 440 version was accepted")
	}
}

func TestManylinuxTag(t *testing.T) {
	for _, tt := range []struct{ glibc, arch, want string }{
		{"2.34", "amd64", "manylinux_2_34_x86_64"},
		{"2.17", "arm64", "manylinux_2_17_aarch64"},
		{"2.3.4", "amd64", "manylinux_2_17_x86_64"}, // older than any manylinux: the oldest tag
		{"2.28", "arm64", "manylinux_2_28_aarch64"},
	} {
		if got, err := manylinuxTag(tt.glibc, tt.arch); err != nil || got != tt.want {
			t.Errorf("manylinuxTag(%q, %s) = %q %v, want %q", tt.glibc, tt.arch, got, err, tt.want)
		}
	}
	if !versionLess("2.9", "2.17") || versionLess("2.34", "2.17") || !versionLess("", "2.2.5") {
		t.Error("versionLess does not compare numerically")
	}
}

// The test binary links internal/cli, hence NVML's cgo: it is what the
// release checks, for this machine's architecture.
func TestInspectELF(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info, err := inspectELF(exe)
	if err != nil {
		t.Fatal(err)
	}
	if info.Arch != runtime.GOARCH {
		t.Errorf("arch %q, this is %s", info.Arch, runtime.GOARCH)
	}
	if info.Interpreter == "" {
		// A CGO_ENABLED=0 build: the release refuses it.
		if err := info.check(runtime.GOARCH); err == nil || !strings.Contains(err.Error(), "interpreter") {
			t.Errorf("a static binary passed the release's check: %v", err)
		}
		return
	}
	if err := info.check(runtime.GOARCH); err != nil {
		t.Errorf("%+v: %v", info, err)
	}
	if !slices.Contains(info.Needed, "libc.so.6") || !versionLess("2.2", info.GLIBC) {
		t.Errorf("%+v: want libc.so.6 and a GLIBC_ version", info)
	}
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if err := info.check(other); err == nil {
		t.Errorf("a %s binary passed as %s", runtime.GOARCH, other)
	}
}
