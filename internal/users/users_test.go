package users

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func fixture(t *testing.T, passwd, group string) *DB {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"passwd": passwd, "group": group} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &DB{Root: root}
}

const passwd = `root:x:0:0:root:/root:/bin/bash
# a comment
alice:x:1001:1001:Alice:/home/alice:/bin/bash
bob:x:1002:100:Bob:/home/bob:/bin/bash
broken line
carol:x:notanumber:1:Carol:/home/carol:/bin/sh
alice:x:1099:1099:duplicate name:/home/x:/bin/sh
`

const groupFile = `root:x:0:
users:x:100:
gpuadmin:x:2000:alice,dave
alice:x:1001:
`

func TestName(t *testing.T) {
	db := fixture(t, passwd, groupFile)
	tests := []struct {
		uid  int
		want string
	}{
		{0, "root"},
		{1001, "alice"},
		{1002, "bob"},
		{1099, "alice"}, // a second line naming alice still names its UID
		{4242, "4242"},  // not in passwd: its number
		{NoUID, Unknown},
	}
	for _, tt := range tests {
		if got := db.Name(tt.uid); got != tt.want {
			t.Errorf("Name(%d) = %q, want %q", tt.uid, got, tt.want)
		}
	}
}

func TestLookup(t *testing.T) {
	db := fixture(t, passwd, groupFile)
	tests := []struct {
		name string
		uid  int
		ok   bool
	}{
		{"alice", 1001, true}, // the first line wins
		{"bob", 1002, true},
		{"1234", 1234, true}, // a number is a UID
		{"carol", 0, false},  // its UID is not a number
		{"nobody-here", 0, false},
		{"-1", 0, false},
	}
	for _, tt := range tests {
		uid, ok := db.Lookup(tt.name)
		if ok != tt.ok || (ok && uid != tt.uid) {
			t.Errorf("Lookup(%q) = %d, %v; want %d, %v", tt.name, uid, ok, tt.uid, tt.ok)
		}
	}
}

func TestInGroup(t *testing.T) {
	db := fixture(t, passwd, groupFile)
	tests := []struct {
		uid   int
		group string
		want  bool
	}{
		{1001, "gpuadmin", true}, // listed member
		{1002, "gpuadmin", false},
		{1002, "users", true}, // primary group
		{1001, "users", false},
		{4242, "gpuadmin", false}, // no name, no membership
		{1001, "nosuch", false},
		{1001, "", false},
	}
	for _, tt := range tests {
		if got := db.InGroup(tt.uid, tt.group); got != tt.want {
			t.Errorf("InGroup(%d, %q) = %v, want %v", tt.uid, tt.group, got, tt.want)
		}
	}
	if !db.HasGroup("gpuadmin") || db.HasGroup("nosuch") {
		t.Error("HasGroup")
	}
}

// TestBoundedRead: a passwd file past MaxFileBytes is read up to the bound;
// names before it resolve, the rest show as numbers.
func TestBoundedRead(t *testing.T) {
	var b strings.Builder
	b.WriteString("first:x:5000:5000::/:/bin/sh\n")
	pad := strings.Repeat("#", 1000) + "\n"
	for b.Len() < MaxFileBytes {
		b.WriteString(pad)
	}
	b.WriteString("late:x:5001:5001::/:/bin/sh\n")
	db := fixture(t, b.String(), "")
	if got := db.Name(5000); got != "first" {
		t.Errorf("Name(5000) = %q", got)
	}
	if got := db.Name(5001); got != "5001" {
		t.Errorf("Name(5001) = %q, want the number (past the bound)", got)
	}
}

func TestMissingFiles(t *testing.T) {
	db := &DB{Root: t.TempDir()}
	if got := db.Name(0); got != "0" {
		t.Errorf("Name(0) without passwd = %q", got)
	}
	if _, ok := db.Lookup("root"); ok {
		t.Error("Lookup without passwd found root")
	}
}

// BenchmarkName is the cost attribution pays per process and pass for its
// owner's name (a cached lookup; the files are checked every few seconds).
func BenchmarkName(b *testing.B) {
	var pw strings.Builder
	for i := range 2000 {
		pw.WriteString("user" + strings.Repeat("x", i%7) + ":x:" + itoa(10000+i) + ":100::/home:/bin/sh\n")
	}
	root := b.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte(pw.String()), 0o644)
	db := &DB{Root: root}
	db.Name(10000)
	b.ResetTimer()
	for i := range b.N {
		_ = db.Name(10000 + i%2000)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestUserAddedAtOnce: a user added just after the database was read, in
// a passwd file with the same modification time (the kernel stamps files
// from a coarse clock), is named at the first lookup of their UID.
func TestUserAddedAtOnce(t *testing.T) {
	root := t.TempDir()
	etc := filepath.Join(root, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := filepath.Join(etc, "passwd")
	write := func(content string, mtime time.Time) {
		t.Helper()
		tmp := passwd + "+"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tmp, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, passwd); err != nil { // as useradd replaces it
			t.Fatal(err)
		}
	}
	mtime := time.Now().Truncate(time.Second)
	write("root:x:0:0::/root:/bin/sh\n", mtime)
	db := &DB{Root: root}
	if got := db.Name(0); got != "root" {
		t.Fatalf("Name(0) = %q", got)
	}
	write("root:x:0:0::/root:/bin/sh\nana:x:1001:1001::/home/ana:/bin/sh\n", mtime)
	if got := db.Name(1001); got != "ana" {
		t.Errorf("Name(1001) just after useradd = %q, want ana", got)
	}
}
