// The job's environment: what each attempt adds to it, and reading and setting its
// variables.

package supervise

import (
	"strconv"
	"strings"
)

// jobEnv is the environment of attempt n of run runID: base with Python's
// output unbuffered (unless base sets PYTHONUNBUFFERED) and the run's id and
// attempt number.
func jobEnv(base []string, runID string, n int) []string {
	env := append([]string(nil), base...)
	if v, _ := lookupEnv(env, "PYTHONUNBUFFERED"); v == "" {
		env = setEnv(env, "PYTHONUNBUFFERED", "1")
	}
	env = setEnv(env, "VRAMGUARD_RUN_ID", runID)
	env = setEnv(env, "VRAMGUARD_ATTEMPT", strconv.Itoa(n))
	return env
}

// lookupEnv finds k in env.
func lookupEnv(env []string, k string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], k+"="); ok {
			return v, true
		}
	}
	return "", false
}

// setEnv is env with k set to v, every earlier setting of k removed.
func setEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, k+"=") {
			out = append(out, e)
		}
	}
	return append(out, k+"="+v)
}
