package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// typeWords are the value names pflag derives from a flag's type; a
// back-quoted word in a flag's usage replaces it, which is how shell
// commands quoted in help text once became value names
// (--kernel vramguard jupyter install).
var typeWords = map[string]bool{
	"":       true, // bool
	"string": true, "strings": true, "stringArray": true,
	"int": true, "ints": true, "uint": true, "float": true, "duration": true, "bytes": true,
}

// TestFlagValueNamesAreTypeWords checks every flag of every command (the
// inherited ones with their command's own) as --help prints it.
func TestFlagValueNamesAreTypeWords(t *testing.T) {
	root := NewCmdRoot(NewFactory())
	n := 0
	walkCommands(root, func(c *cobra.Command) {
		check := func(fl *pflag.Flag) {
			n++
			if name, _ := pflag.UnquoteUsage(fl); !typeWords[name] {
				t.Errorf("%s --%s: --help shows its value as %q, not a type: back quotes in the usage make a value name", c.CommandPath(), fl.Name, name)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.InheritedFlags().VisitAll(check)
	})
	if n < 100 {
		t.Fatalf("only %d flags seen: the walk missed commands", n)
	}
}

// TestHelpHidesDeveloperFlags: analyze's scoring is for vramguard's
// developers, and --help keeps it out of users' way (it still works).
func TestHelpHidesDeveloperFlags(t *testing.T) {
	out, _, code := runCLI(t, false, "analyze", "--help")
	if code != 0 || !strings.Contains(out, "--attempt") {
		t.Fatalf("analyze --help: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "--score") || strings.Contains(out, "labelled") {
		t.Errorf("analyze --help shows the developers' scoring:\n%s", out)
	}
	_, errOut, code := runCLI(t, false, "analyze", "--score", t.TempDir())
	if code == ExitUsage && strings.Contains(errOut, "unknown flag") {
		t.Errorf("the hidden --score no longer works: %s", errOut)
	}
}
