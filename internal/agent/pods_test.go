package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/attrib"
)

// podJobs: a trainer in a pod whose log directory names it (its cgroup
// writes the UID with '_', as the systemd driver does), and one in a pod
// without a log directory.
const podJobs = `{
  "name": "pods", "duration": "1h",
  "devices": [{"name": "Test GPU", "uuid": "GPU-test-0", "total": "80GiB"}],
  "processes": [
    {"pid": 962001, "device": 0, "memory": "20GiB", "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"], "rss": "4GiB",
     "cgroup": "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/cri-containerd-9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d.scope\n"}},
    {"pid": 962002, "device": 0, "memory": "10GiB", "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "eval.py"], "rss": "2GiB",
     "cgroup": "0::/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice/cri-containerd-4c5b1d0e8a7f6e5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2918f7e6d5c.scope\n"}}
  ]}`

// TestPodNamespaceLabels: a pod's namespace and name reach the metrics'
// namespace and pod labels and the API; a pod the kubelet's directory does
// not name keeps its UID and an empty namespace.
func TestPodNamespaceLabels(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ml-team_llama-finetune-0_0a1b2c3d-4e5f-6789-abcd-ef0123456789", "trainer"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newRigPods(t, podJobs, Config{}, attrib.NewPodIndex(dir))
	r.step(2)
	_, m := r.do("GET", "/metrics", "", "")
	for _, want := range []string{
		`vramguard_job_gpu_memory_bytes{container="9e8d7c6b5a4f",gpu="0",job_name="python3 train.py",kind="pod",namespace="ml-team",notebook="",pod="llama-finetune-0",user="root",uuid="GPU-test-0"} 2.147483648e+10`,
		`vramguard_job_gpu_memory_bytes{container="4c5b1d0e8a7f",gpu="0",job_name="python3 eval.py",kind="pod",namespace="",notebook="",pod="11111111-2222-3333-4444-555555555555",user="root",uuid="GPU-test-0"} 1.073741824e+10`,
		`pod_uid="0a1b2c3d-4e5f-6789-abcd-ef0123456789"`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s\n%s", want, grepLines(m, "job_gpu_memory_bytes"))
		}
	}
	if strings.Contains(m, `vramguard_job_rss_bytes{container="9e8d7c6b5a4f",job_name="python3 train.py",kind="pod",namespace="ml-team",notebook="",pod="llama-finetune-0",pod_uid`) {
		t.Error("pod_uid outside job_info")
	}
	_, body := r.do("GET", "/api/v1/jobs", "", "")
	var jobs struct{ Jobs []JobView }
	if err := json.Unmarshal([]byte(body), &jobs); err != nil {
		t.Fatal(err)
	}
	got := map[string]Labels{}
	for _, j := range jobs.Jobs {
		got[j.Name] = j.Labels
	}
	if l := got["python3 train.py"]; l.Namespace != "ml-team" || l.Pod != "llama-finetune-0" || l.PodUID != "0a1b2c3d-4e5f-6789-abcd-ef0123456789" {
		t.Errorf("train.py labels in the API: %+v", l)
	}
	if l := got["python3 eval.py"]; l.Namespace != "" || l.Pod != "11111111-2222-3333-4444-555555555555" {
		t.Errorf("eval.py labels in the API: %+v", l)
	}
}
