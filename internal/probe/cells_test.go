package probe

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
)

// TestHookCellEvents sends a notebook kernel's messages over the socket as
// the probe writes them and checks the events the supervisor is handed:
// each once, at the probe's times, with the figures sent.
func TestHookCellEvents(t *testing.T) {
	h, c := attemptHook(t)
	lines := []string{
		`{"v":1,"type":"hello","pid":500,"ts":1}`,
		`{"v":1,"type":"cell_start","pid":500,"ts":100.5,"execution_count":7,"first_line":"x = torch.zeros(1 << 28)","rss_bytes":1000}`,
		`{"v":1,"type":"cell","pid":500,"ts":112.8,"execution_count":7,"first_line":"x = torch.zeros(1 << 28)","seconds":12.3,"rss_bytes":221201000,"rss_delta":220200960,"rss_peak_delta":858993459,"cuda":[{"device":0,"allocated_delta":1288490189,"allocated_peak_delta":3650722202,"reserved_bytes":9771050598,"reserved_delta":2147483648}]}`,
		`{"v":1,"type":"cell","pid":500,"ts":113,"execution_count":8,"first_line":"1/0","seconds":0.001,"error":"ZeroDivisionError","rss_bytes":5}`,
		`{"v":1,"type":"ckpt","pid":500,"ts":120,"path":"/w/autosave-20260101-000000-8.pt","bytes":4096,"ok":true,"atomic":true,"autosave":true,"objects":["model","opt"]}`,
		`{"v":1,"type":"ckpt","pid":500,"ts":121,"path":"/w/other.pt","bytes":10,"ok":true}`,
	}
	if _, err := c.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
	var evs []timeline.Event
	deadline := time.Now().Add(5 * time.Second)
	for len(evs) < 4 && time.Now().Before(deadline) {
		evs = append(evs, h.Events()...)
		time.Sleep(5 * time.Millisecond)
	}
	if len(evs) != 4 {
		t.Fatalf("events %+v, want cell_start, cell, cell, checkpoint (not the plain save)", evs)
	}
	if more := h.Events(); len(more) != 0 {
		t.Errorf("events handed out twice: %+v", more)
	}
	wantKinds := []string{timeline.KindCellStart, timeline.KindCell, timeline.KindCell, timeline.KindCheckpoint}
	for i, e := range evs {
		if e.Kind != wantKinds[i] {
			t.Errorf("event %d: %s, want %s", i, e.Kind, wantKinds[i])
		}
	}
	var d timeline.CellData
	if err := json.Unmarshal(evs[1].Data, &d); err != nil {
		t.Fatal(err)
	}
	if d.ExecutionCount != 7 || d.End == nil || d.End.Sub(time.Unix(112, 8e8)).Abs() > time.Millisecond || d.Start.Sub(time.Unix(100, 5e8)).Abs() > time.Millisecond ||
		d.RSSDelta != 220200960 || len(d.CUDA) != 1 || d.CUDA[0].AllocatedPeakDelta != 3650722202 {
		t.Errorf("cell data %+v", d)
	}
	if got, want := evs[1].Message, "In[7] +1.2 GiB allocated (peak +3.4 GiB), reserved 9.1 GiB; host +210 MiB (peak +819 MiB); 12.3 s"; got != want {
		t.Errorf("message %q\nwant    %q", got, want)
	}
	if got := evs[2].Message; got != "In[8] host +0 B (peak +0 B); 0.0 s; raised ZeroDivisionError" {
		t.Errorf("message of a cell that raised: %q", got)
	}
	var ck timeline.CheckpointData
	json.Unmarshal(evs[3].Data, &ck)
	if !ck.Autosave || ck.Path != "/w/autosave-20260101-000000-8.pt" || strings.Join(ck.Objects, ",") != "model,opt" || ck.Bytes != 4096 || !evs[3].T.Equal(time.Unix(120, 0)) {
		t.Errorf("autosave %+v at %s", ck, evs[3].T)
	}
}
