package agent

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// manyUsers is a scenario with MaxUserLabels+extra users, user i holding
// (i+1) MiB on the one GPU, and a GPU record whose PID /proc does not show.
func manyUsers(extra int, vanishedMiB int) string {
	var procs []string
	for i := range MaxUserLabels + extra {
		procs = append(procs, fmt.Sprintf(`{"pid": %d, "device": 0, "memory": "%dMiB", "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "u%d.py"], "uid": %d, "user": "user%03d"}}`,
			970000+i, i+1, i, 5000+i, i))
	}
	procs = append(procs, fmt.Sprintf(`{"pid": 979999, "device": 0, "memory": "%dMiB"}`, vanishedMiB))
	return `{"name": "many-users", "duration": "1h",
  "devices": [{"name": "Test GPU", "uuid": "GPU-test-0", "total": "80GiB"}],
  "processes": [` + strings.Join(procs, ",\n") + `]}`
}

// TestUserLabelBounded: the user label takes at most MaxUserLabels names
// (the first the agent exported) and "other" for the rest; the per-user
// memory series add up, with the memory of the PID /proc does not show
// under "unknown", to what the driver reports for the GPU's processes (the
// scenario's figures, summed here independently).
func TestUserLabelBounded(t *testing.T) {
	const extra, vanished = 3, 700
	r := newRig(t, manyUsers(extra, vanished), Config{})
	r.step(2)
	m := scrape(t, r.ag)
	label := regexp.MustCompile(`(\w+)="([^"]*)"`)
	labels := func(s string) map[string]string {
		l := map[string]string{}
		for _, kv := range label.FindAllStringSubmatch(s, -1) {
			l[kv[1]] = kv[2]
		}
		return l
	}
	jobUsers := map[string]int{}
	for _, s := range regexp.MustCompile(`(?m)^vramguard_job_rss_bytes\{([^}]*)\}`).FindAllStringSubmatch(m, -1) {
		jobUsers[labels(s[1])["user"]]++
	}
	if len(jobUsers) != MaxUserLabels+1 || jobUsers[OtherUser] != extra {
		t.Errorf("job series carry %d user values, %d of them %q; want %d names and %d others",
			len(jobUsers), jobUsers[OtherUser], OtherUser, MaxUserLabels, extra)
	}
	perUser := map[string]float64{}
	for _, s := range regexp.MustCompile(`(?m)^vramguard_user_gpu_memory_bytes\{([^}]*)\} (\S+)$`).FindAllStringSubmatch(m, -1) {
		v, err := strconv.ParseFloat(s[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		perUser[labels(s[1])["user"]] += v
	}
	// independent sums: user i holds i+1 MiB; the named ones are the
	// first MaxUserLabels the agent exported, which users are those
	// depends on the order it saw them, so only the totals are fixed
	var all, other float64
	for i := range MaxUserLabels + extra {
		all += float64((i + 1) << 20)
	}
	for u, v := range perUser {
		if u != OtherUser && u != "unknown" {
			other += v
		}
	}
	if got := perUser["unknown"]; got != float64(vanished<<20) {
		t.Errorf("unknown owner holds %v, want the vanished PID's %d MiB", got, vanished)
	}
	if got := other + perUser[OtherUser]; got != all {
		t.Errorf("named + other users hold %v, the scenario's processes %v", got, all)
	}
	if jobUsers[OtherUser] > 0 && perUser[OtherUser] == 0 {
		t.Errorf("%q jobs but no %q memory", OtherUser, OtherUser)
	}
	// a name keeps its label from scrape to scrape
	again := scrape(t, r.ag)
	for u := range jobUsers {
		if u != OtherUser && !strings.Contains(again, `user="`+u+`"`) {
			t.Errorf("user %s lost its label on the next scrape", u)
		}
	}
}
