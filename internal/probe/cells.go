package probe

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

// maxFirstLine bounds a cell's first line as it is kept (the probe sends at
// most 200 characters; a line from elsewhere is cut here too).
const maxFirstLine = 200

// event is the timeline event a message makes, if any: cell_start and cell
// from a notebook kernel's probe, checkpoint for an autosave.
func event(m Message) (timeline.Event, bool) {
	switch m.Type {
	case TypeCellStart, TypeCell:
		d := CellData(m)
		e := timeline.Event{T: m.Time().UTC(), Kind: timeline.KindCellStart, Data: marshal(d)}
		if m.Type == TypeCellStart {
			e.Message = fmt.Sprintf("In[%d] started: %s", d.ExecutionCount, d.FirstLine)
			return e, true
		}
		e.Kind = timeline.KindCell
		e.Message = CellLine(d)
		return e, true
	case TypeCkpt:
		if !m.Autosave || m.Error != "" || m.Path == "" {
			return timeline.Event{}, false
		}
		d := timeline.CheckpointData{PID: m.PID, Path: m.Path, Autosave: true, Objects: m.Objects, Script: m.Script, Signal: m.Signal, Fallback: m.Fallback}
		if m.Bytes != nil {
			d.Bytes = *m.Bytes
		}
		return timeline.Event{T: m.Time().UTC(), Kind: timeline.KindCheckpoint, Data: marshal(d),
			Message: fmt.Sprintf("autosave of %s: %s (%s)", strings.Join(m.Objects, ", "), m.Path, units.FormatBytes(uint64(max(d.Bytes, 0))))}, true
	}
	return timeline.Event{}, false
}

// CellData is a cell message as the timeline keeps it. A cell message's ts
// is its end; its start is that less the cell's duration.
func CellData(m Message) timeline.CellData {
	line := m.FirstLine
	if len(line) > maxFirstLine {
		line = line[:maxFirstLine]
	}
	d := timeline.CellData{PID: m.PID, ExecutionCount: m.ExecutionCount, FirstLine: line, Start: m.Time().UTC(), RSSBytes: m.RSSBytes}
	if m.Type != TypeCell {
		return d
	}
	end := d.Start
	d.End = &end
	d.Start = end.Add(-time.Duration(m.Seconds * float64(time.Second)))
	d.Seconds, d.Error, d.RSSDelta, d.RSSPeakDelta = m.Seconds, m.Error, m.RSSDelta, m.RSSPeakDelta
	for _, c := range m.CUDA {
		d.CUDA = append(d.CUDA, timeline.CellDevice{Device: c.Device, AllocatedDelta: c.AllocatedDelta,
			AllocatedPeakDelta: c.AllocatedPeakDelta, ReservedBytes: c.ReservedBytes, ReservedDelta: c.ReservedDelta})
	}
	return d
}

// CellLine says what an ended cell changed, as the timeline's message:
// "In[7] +1.2 GiB allocated (peak +3.4 GiB), reserved 9.1 GiB; host +210 MiB (peak +820 MiB); 12.3 s".
func CellLine(d timeline.CellData) string {
	var parts []string
	for _, c := range d.CUDA {
		dev := ""
		if len(d.CUDA) > 1 {
			dev = fmt.Sprintf("cuda:%d ", c.Device)
		}
		parts = append(parts, fmt.Sprintf("%s%s allocated (peak %s), reserved %s", dev, signed(c.AllocatedDelta),
			signed(c.AllocatedPeakDelta), units.FormatBytes(uint64(max(c.ReservedBytes, 0)))))
	}
	parts = append(parts, fmt.Sprintf("host %s (peak %s)", signed(d.RSSDelta), signed(d.RSSPeakDelta)))
	s := fmt.Sprintf("In[%d] %s; %.1f s", d.ExecutionCount, strings.Join(parts, "; "), d.Seconds)
	if d.Error != "" {
		s += "; raised " + d.Error
	}
	return s
}

// signed formats a byte delta with its sign.
func signed(b int64) string {
	if b < 0 {
		return "-" + units.FormatBytes(uint64(-b))
	}
	return "+" + units.FormatBytes(uint64(b))
}

func marshal(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
