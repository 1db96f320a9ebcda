package agent

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDeployFilesNameRealMetrics checks that every vramguard_* metric the
// Prometheus rules and the Grafana dashboard query, and docs/SERVE.md
// names, is one the agent exports.
func TestDeployFilesNameRealMetrics(t *testing.T) {
	have := map[string]bool{}
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, d := range metricDescs() {
		have[name.FindStringSubmatch(d)[1]] = true
	}
	used := regexp.MustCompile(`vramguard_[a-z_]+`)
	for _, f := range []string{"../../deploy/prometheus/rules.yml", "../../deploy/grafana/vramguard.json", "../../docs/SERVE.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range used.FindAllString(string(b), -1) {
			if strings.HasSuffix(m, "_") {
				continue
			}
			n++
			if !have[m] {
				t.Errorf("%s names %s, which the agent does not export", f, m)
			}
		}
		if n == 0 {
			t.Errorf("%s names no vramguard metric", f)
		}
	}
}

// TestDashboardRankRow checks the Grafana dashboard's distributed-job row:
// a group variable over the rank series' group label, a row repeated per
// group, and below it panels of one line per rank (legend node and rank)
// that query real rank metrics for the row's group.
func TestDashboardRankRow(t *testing.T) {
	var d struct {
		Templating struct {
			List []struct{ Name, Type, Query string }
		}
		Panels []struct {
			Type, Title, Repeat string
			GridPos             struct{ X, Y, W, H int }
			Targets             []struct{ Expr, LegendFormat string }
		}
	}
	readDashboard(t, &d)
	rankMetrics := map[string]bool{}
	for _, desc := range metricDescs() {
		if m := regexp.MustCompile(`fqName: "(vramguard_rank_[a-z_]+)"`).FindStringSubmatch(desc); m != nil {
			rankMetrics[m[1]] = true
		}
	}
	if len(rankMetrics) < 2 {
		t.Fatalf("rank metrics %v", rankMetrics)
	}
	names := regexp.MustCompile(`vramguard_rank_[a-z_]+`)
	var groupVar bool
	for _, v := range d.Templating.List {
		if v.Name == "group" {
			m := names.FindString(v.Query)
			groupVar = v.Type == "query" && strings.HasPrefix(v.Query, "label_values(") && strings.HasSuffix(v.Query, ", group)") && rankMetrics[m]
		}
	}
	if !groupVar {
		t.Fatalf("no group variable over a rank metric's group label: %+v", d.Templating.List)
	}
	row := -1
	for i, p := range d.Panels {
		if p.Type == "row" && p.Repeat == "group" {
			row = i
		}
	}
	if row < 0 || !strings.Contains(d.Panels[row].Title, "$group") {
		t.Fatalf("no row repeated per group (titled with $group)")
	}
	n := 0
	for _, p := range d.Panels[row+1:] {
		if p.Type == "row" {
			break
		}
		if p.GridPos.Y <= d.Panels[row].GridPos.Y {
			t.Errorf("panel %q is not below the row", p.Title)
		}
		for _, tg := range p.Targets {
			n++
			m := names.FindString(tg.Expr)
			if !rankMetrics[m] || !strings.Contains(tg.Expr, `group=~"$group"`) {
				t.Errorf("panel %q queries %q: want a rank metric of the row's group", p.Title, tg.Expr)
			}
			if !strings.Contains(tg.LegendFormat, "{{node}}") || !strings.Contains(tg.LegendFormat, "{{rank}}") {
				t.Errorf("panel %q legend %q: want one line per node and rank", p.Title, tg.LegendFormat)
			}
		}
	}
	if n < 2 {
		t.Fatalf("the group row has %d queries", n)
	}
}

// TestDashboardUserRow checks the Grafana dashboard's per-user row: a row
// titled Users whose panels draw one line per user (legend {{user}}) from
// metrics the agent exports with a user label.
func TestDashboardUserRow(t *testing.T) {
	var d struct {
		Panels []struct {
			Type, Title string
			GridPos     struct{ Y int }
			Targets     []struct{ Expr, LegendFormat string }
		}
	}
	readDashboard(t, &d)
	withUser := map[string]bool{}
	re := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	for _, desc := range metricDescs() {
		if m := re.FindStringSubmatch(desc); m != nil && regexp.MustCompile(`\buser\b`).MatchString(m[2]) {
			withUser[m[1]] = true
		}
	}
	row := slices.IndexFunc(d.Panels, func(p struct {
		Type, Title string
		GridPos     struct{ Y int }
		Targets     []struct{ Expr, LegendFormat string }
	}) bool {
		return p.Type == "row" && p.Title == "Users"
	})
	if row < 0 || len(withUser) < 2 {
		t.Fatalf("no Users row (row %d), or too few metrics with a user label: %v", row, withUser)
	}
	n := 0
	for _, p := range d.Panels[row+1:] {
		if p.Type == "row" {
			break
		}
		for _, tg := range p.Targets {
			n++
			for _, m := range regexp.MustCompile(`vramguard_[a-z_]+`).FindAllString(tg.Expr, -1) {
				if !withUser[m] {
					t.Errorf("panel %q queries %s, which has no user label", p.Title, m)
				}
			}
			if tg.LegendFormat != "{{user}}" || !strings.Contains(tg.Expr, "by (user)") {
				t.Errorf("panel %q: %q legend %q, want one line per user", p.Title, tg.Expr, tg.LegendFormat)
			}
		}
	}
	if n < 3 {
		t.Fatalf("the Users row has %d queries", n)
	}
}

// metricDescs are the descriptions of every metric the agent exports.
func metricDescs() []string {
	ch := make(chan *prometheus.Desc, 100)
	(&collector{}).Describe(ch)
	close(ch)
	var descs []string
	for d := range ch {
		descs = append(descs, d.String())
	}
	return descs
}

// readDashboard reads the Grafana dashboard the project ships into d.
func readDashboard(t *testing.T, d any) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/grafana/vramguard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, d); err != nil {
		t.Fatal(err)
	}
}
