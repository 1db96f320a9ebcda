package cli

import (
	"strings"
	"testing"
)

// TestResumePlaceholderInCode: {resume} is refused where a program reads
// it as code (a shell's -c script, Python's -c program), also behind the
// commands that only run another; accepted as an argument anywhere else.
func TestResumePlaceholderInCode(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string // "" accepted, else a word the refusal contains
	}{
		{[]string{"bash", "-c", "train --resume {resume}"}, "shell code"},
		{[]string{"sh", "-ec", "echo {resume}"}, "shell code"},
		{[]string{"bash", "-o", "pipefail", "-c", "x {resume}"}, "shell code"},
		{[]string{"env", "bash", "-c", "x {resume}"}, "shell code"},
		{[]string{"/usr/bin/env", "-i", "A=1", "-u", "B", "B=2", "bash", "-c", "x {resume}"}, "shell code"},
		{[]string{"env", "--", "sh", "-c", "{resume}"}, "shell code"},
		{[]string{"nice", "-n", "10", "nohup", "bash", "-c", "x {resume}"}, "shell code"},
		{[]string{"timeout", "-s", "INT", "3h", "sh", "-c", "x {resume}"}, "shell code"},
		{[]string{"taskset", "-c", "0-3", "stdbuf", "-oL", "sh", "-c", "x {resume}"}, "shell code"},
		{[]string{"setsid", "-w", "bash", "-lc", "x {resume}"}, "shell code"},
		{[]string{"python3", "-c", "load('{resume}')"}, "as Python"},
		{[]string{"python", "-u", "-c", "load('{resume}')"}, "as Python"},
		{[]string{"python3.11", "-uc", "load('{resume}')"}, "as Python"},
		{[]string{"python3", "-c'load(\"{resume}\")'"}, "as Python"},
		{[]string{"python3", "-W", "ignore", "-X", "dev", "-c", "load('{resume}')"}, "as Python"},
		{[]string{"env", "CUDA_VISIBLE_DEVICES=0", "python3", "-c", "load('{resume}')"}, "as Python"},
		{[]string{"pypy3", "-c", "{resume}"}, "as Python"},

		{[]string{"python3", "train.py", "--resume", "{resume}"}, ""},
		{[]string{"python3", "train.py", "-c", "{resume}"}, ""},
		{[]string{"python3", "-m", "train", "-c", "{resume}"}, ""},
		{[]string{"python3", "-c", "import sys; load(sys.argv[1])", "{resume}"}, ""},
		{[]string{"bash", "-c", `train "$1"`, "sh", "{resume}"}, ""},
		{[]string{"bash", "train.sh", "-c", "{resume}"}, ""},
		{[]string{"env", "A=1", "python3", "train.py", "--resume={resume}"}, ""},
		{[]string{"timeout", "3h", "torchrun", "train.py", "{resume}"}, ""},
		{[]string{"pythonic", "-c", "{resume}"}, ""},
		{[]string{"env"}, ""},
		{[]string{"nice", "-n"}, ""},
	} {
		err := checkResumePlaceholder(c.argv)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: refused: %v", c.argv, err)
		case c.want != "" && err == nil:
			t.Errorf("%q: accepted, want refused", c.argv)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%q: %v, want it to say %q", c.argv, err, c.want)
		}
	}
}
