package testbin

import (
	"os"
	"strings"
	"testing"
)

// TestDepsAreListed keeps the two lists one: every Debian package a test
// names in its one-line failure is one scripts/test.sh installs.
func TestDepsAreListed(t *testing.T) {
	b, err := os.ReadFile("../../scripts/test-packages.txt")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if f := strings.Fields(line); len(f) > 0 {
			listed[f[0]] = true
		}
	}
	for _, d := range AllDeps {
		if !listed[d.Package] {
			t.Errorf("%s is a test dependency but not in scripts/test-packages.txt", d.Package)
		}
	}
}

func TestMissingNamesThePackageInOneLine(t *testing.T) {
	cases := []struct {
		name    string
		dep     Dep
		missing bool
		cause   string
	}{
		{"program", Dep{Package: "vg-test-absent-prog", Programs: []string{"sh", "vramguard-no-such-program"}}, true, "vramguard-no-such-program is not on PATH"},
		{"module", Dep{Package: "vg-test-absent-mod", Modules: []string{"json", "vramguard_no_such_module"}}, true, "No module named 'vramguard_no_such_module'"},
		{"submodule", Dep{Package: "vg-test-absent-sub", Modules: []string{"email.vramguard_no_such_module"}}, true, "No module named 'email.vramguard_no_such_module'"},
		{"present", Dep{Package: "vg-test-present", Programs: []string{"sh"}, Modules: []string{"json", "email.mime.text"}}, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.dep.Missing()
			if !c.missing {
				if got != "" {
					t.Fatalf("Missing() = %q, want present", got)
				}
				return
			}
			if strings.Contains(got, "\n") || !strings.Contains(got, "needs Debian package "+c.dep.Package) || !strings.Contains(got, c.cause) {
				t.Fatalf("Missing() = %q, want one line naming %s and %q", got, c.dep.Package, c.cause)
			}
		})
	}
}

// TestImportIgnoresPYTHONPATH: a directory on PYTHONPATH with a module of
// the same name (the tests' own fakes) must not make a missing package look
// installed.
func TestImportIgnoresPYTHONPATH(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/vramguard_shadow_mod.py", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", dir)
	d := Dep{Package: "vg-test-shadow", Modules: []string{"vramguard_shadow_mod"}}
	if d.Missing() == "" {
		t.Fatal("a module only on PYTHONPATH counted as installed")
	}
}
