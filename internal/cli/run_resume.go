package cli

import (
	"path/filepath"
	"strings"
)

// shells are the programs whose -c operand is shell code.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true}

// checkResumePlaceholder refuses {resume} inside the script of `sh -c
// SCRIPT` (bash, dash, zsh, ...): the placeholder is replaced by the
// checkpoint's path verbatim, and a file named `ck;touch x;.pt` would run
// as shell code. As a whole argument, in --resume={resume}, or as a
// positional parameter after the script, no shell reads it as code.
func checkResumePlaceholder(argv []string) error {
	i := shellScript(argv)
	if i < 0 || !strings.Contains(argv[i], "{resume}") {
		return nil
	}
	sh := filepath.Base(argv[0])
	return Usagef(`{resume} in the script of "%s -c" would run the checkpoint's path as shell code (a file named 'x;rm -rf ~;.pt'): use "$VRAMGUARD_RESUME" in the script instead, or pass {resume} after it as an argument: %s -c '... "$1"' %s {resume}`, sh, sh, sh)
}

// shellScript returns the index in argv of the shell code a shell runs
// with -c (the first operand after options that include c), or -1.
func shellScript(argv []string) int {
	if len(argv) < 2 || !shells[filepath.Base(argv[0])] {
		return -1
	}
	sawC := false
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--" || a == "-":
			if sawC && i+1 < len(argv) {
				return i + 1
			}
			return -1
		case strings.HasPrefix(a, "--"):
			// long options (--norc, --login, --posix) take no operand here
		case len(a) > 1 && (a[0] == '-' || a[0] == '+'):
			for _, c := range a[1:] {
				if c == 'c' {
					sawC = true
				}
			}
			// -o OPTION and -O SHOPT take the next argument.
			if last := a[len(a)-1]; last == 'o' || last == 'O' {
				i++
			}
		default:
			if sawC {
				return i
			}
			return -1
		}
	}
	return -1
}
