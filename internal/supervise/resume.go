package supervise

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// The {resume} rule: the checkpoint's path is substituted into the
// command's arguments only when it is made of characters that no shell,
// interpreter or option parser reads as anything but a path (letters,
// digits and . _ - + = /) and it does not start with '-': a relative path
// is passed as ./NAME. Any other name is refused, with the reason, and
// $VRAMGUARD_RESUME, which carries every name verbatim, is the way to pass
// it. Refusing programs that read an argument as code (sh -c, python -c)
// cannot be complete (env -S, xargs sh -c, flock -c, perl -e, awk, ...);
// this rule makes the substitution safe wherever it lands.

// UnsafeResumeError is a checkpoint path that {resume} will not carry.
type UnsafeResumeError struct {
	Path   string
	Reason string
}

func (e *UnsafeResumeError) Error() string {
	return fmt.Sprintf(`{resume}: the checkpoint path %q %s, which a shell, an interpreter or an option parser may read as more than a path; `+
		`{resume} carries only paths of letters, digits and . _ - + = /. Read the path from the environment instead: "$VRAMGUARD_RESUME" in a script, os.environ["VRAMGUARD_RESUME"] in Python`, e.Path, e.Reason)
}

// IsUnsafeResume reports whether err is (or wraps) an UnsafeResumeError.
func IsUnsafeResume(err error) bool {
	var u *UnsafeResumeError
	return errors.As(err, &u)
}

// ResumeArg is path as {resume} carries it: ./path when relative (so that
// it never starts with '-', and keeps its ./ under --resume-from .), or an
// UnsafeResumeError when a character of it is not a plain path character.
func ResumeArg(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	for _, r := range path {
		if !safePathRune(r) {
			what := fmt.Sprintf("holds %q", r)
			switch {
			case r == ' ' || r == '\t' || r == '\n':
				what = "holds white space"
			case r < 0x20 || r == 0x7f:
				what = "holds a control character"
			case r > 0x7f:
				what = "holds a character outside ASCII"
			}
			return "", &UnsafeResumeError{Path: path, Reason: what}
		}
	}
	if !filepath.IsAbs(path) && !strings.HasPrefix(path, "./") && !strings.HasPrefix(path, "../") {
		path = "./" + path
	}
	return path, nil
}

func safePathRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("._-+=/", r)
}

// HasResumePlaceholder reports whether an argument of argv holds {resume}.
func HasResumePlaceholder(argv []string) bool {
	for _, a := range argv {
		if strings.Contains(a, "{resume}") {
			return true
		}
	}
	return false
}
