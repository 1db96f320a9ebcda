package cli

import (
	"path/filepath"
	"strings"

	"github.com/vramguard/vramguard/internal/lazyre"
)

// shells are the programs whose -c operand is shell code.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true}

// pythonName matches the names of Python interpreters, whose -c operand is
// Python code: python, python3, python3.11, pypy3.
var pythonName = lazyre.New(`^(python|pypy)(\d+(\.\d+)*)?$`)

// checkResumePlaceholder refuses {resume} inside code that a program reads
// as code: the script of `sh -c SCRIPT` (bash, dash, zsh, ...) and the
// program of `python -c CODE`, also behind env, nice, nohup, setsid, stdbuf,
// taskset or timeout. The placeholder is replaced by the checkpoint's path
// verbatim, and a file named `ck;touch x;.pt` would run as shell code (one
// named `ck');import os;os.system('x');('.pt` as Python). As a whole
// argument, in --resume={resume}, or as a positional parameter after the
// code, nothing reads it as code.
func checkResumePlaceholder(argv []string) error {
	start := skipWrappers(argv)
	if start < 0 {
		return nil
	}
	prog := filepath.Base(argv[start])
	if i := shellScript(argv[start:]); i >= 0 && strings.Contains(argv[start+i], "{resume}") {
		return Usagef(`{resume} in the script of "%s -c" would run the checkpoint's path as shell code (a file named 'x;rm -rf ~;.pt'): use "$VRAMGUARD_RESUME" in the script instead, or pass {resume} after it as an argument: %s -c '... "$1"' %s {resume}`, prog, prog, prog)
	}
	if i, inline := pythonCode(argv[start:]); i >= 0 {
		code := argv[start+i]
		if inline {
			code = code[strings.Index(code, "c")+1:]
		}
		if strings.Contains(code, "{resume}") {
			return Usagef(`{resume} in the code of "%s -c" would run the checkpoint's path as Python (a file named "x');import os;os.system('...');('.pt"): use os.environ["VRAMGUARD_RESUME"] in the code instead, or pass {resume} after it and read sys.argv[1]: %s -c '...' {resume}`, prog, prog)
		}
	}
	return nil
}

// skipWrappers returns the index in argv of the program that runs after
// the commands that only run another (env, nice, nohup, setsid, stdbuf,
// taskset, timeout) with their options, or -1 when nothing is left after
// them.
func skipWrappers(argv []string) int {
	i := 0
	for i < len(argv) {
		n := wrapperArgs(filepath.Base(argv[i]), argv[i+1:])
		if n < 0 {
			return i
		}
		i += 1 + n
	}
	return -1
}

// wrapperArgs returns how many of args are the wrapper prog's own (options,
// operands, env's NAME=VALUE), or -1 when prog is no wrapper.
func wrapperArgs(prog string, args []string) int {
	// opts: the options of prog that take the next argument (when not
	// written as --opt=value or -Xvalue); operands: how many operands come
	// before the command.
	var opts map[string]bool
	operands := 0
	switch prog {
	case "env":
		opts = map[string]bool{"-u": true, "--unset": true, "-C": true, "--chdir": true, "-S": true, "--split-string": true}
	case "nice":
		opts = map[string]bool{"-n": true, "--adjustment": true}
	case "nohup":
	case "setsid":
	case "stdbuf":
		opts = map[string]bool{"-i": true, "-o": true, "-e": true, "--input": true, "--output": true, "--error": true}
	case "taskset":
		operands = 1 // the mask, or the list after -c
	case "timeout":
		opts = map[string]bool{"-s": true, "--signal": true, "-k": true, "--kill-after": true}
		operands = 1 // the duration
	default:
		return -1
	}
	i := 0
	for i < len(args) {
		a := args[i]
		switch {
		case a == "--":
			i++
			return i + operands
		case prog == "env" && !strings.HasPrefix(a, "-") && strings.Contains(a, "="):
			i++ // NAME=VALUE
		case len(a) > 1 && a[0] == '-':
			i++
			if opts[a] {
				i++
			}
		default:
			return i + operands
		}
	}
	return i
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

// pythonCode returns the index in argv of the program a Python interpreter
// runs with -c, or -1; inline is set when the code follows the c in the
// same argument (-c'print(1)', -uc'...'). Python's options before it are
// single letters, bundled or not; -W and -X take an argument.
func pythonCode(argv []string) (i int, inline bool) {
	if len(argv) < 2 || !pythonName.MatchString(filepath.Base(argv[0])) {
		return -1, false
	}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--check-hash-based-pycs":
			i++ // its argument
			continue
		case strings.HasPrefix(a, "--") && a != "--":
			continue // --version, --help
		case len(a) < 2 || a[0] != '-' || a == "--":
			return -1, false // a script (or stdin) runs: nothing after it is code
		}
		for j := 1; j < len(a); j++ {
			switch a[j] {
			case 'c':
				if j+1 < len(a) {
					return i, true
				}
				if i+1 < len(argv) {
					return i + 1, false
				}
				return -1, false
			case 'm':
				return -1, false // a module runs
			case 'W', 'X':
				if j+1 == len(a) {
					i++ // the argument is the next one
				}
				j = len(a)
			}
		}
	}
	return -1, false
}
