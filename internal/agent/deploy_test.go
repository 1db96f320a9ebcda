package agent

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDeployFilesNameRealMetrics checks that every vramguard_* metric the
// Prometheus rules and the Grafana dashboard query, and docs/SERVE.md
// names, is one the agent exports.
func TestDeployFilesNameRealMetrics(t *testing.T) {
	ch := make(chan *prometheus.Desc, 100)
	(&collector{}).Describe(ch)
	close(ch)
	have := map[string]bool{}
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		have[name.FindStringSubmatch(d.String())[1]] = true
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
