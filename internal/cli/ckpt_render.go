package cli

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vramguard/vramguard/internal/ckpt"
	"github.com/vramguard/vramguard/internal/termsafe"
	"github.com/vramguard/vramguard/internal/units"
)

func optInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func renderEntries(f *Factory, es []ckpt.Entry) {
	if len(es) == 0 {
		fmt.Fprintln(f.IO.Out, "no checkpoints")
		return
	}
	tw := tabwriter.NewWriter(f.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tFORMAT\tSIZE\tMODIFIED\tSTEP\tEPOCH\tMETRICS\tSTATUS")
	for _, e := range es {
		status := "ok"
		step, epoch, metrics := optInt(e.Step), epochString(e.Epoch, e.EpochValue), metricsString(e.Metrics)
		switch {
		case e.Kind == ckpt.KindOther:
			// A vocabulary's "step" entry is a word's index, not a step.
			status = "not a checkpoint: " + termsafe.String(e.Note)
			step, epoch, metrics = "-", "-", "-"
		case !e.Valid:
			status = "INVALID: " + termsafe.String(e.Reason)
		case e.Incomplete != "":
			status = "ok, " + termsafe.String(e.Incomplete)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ckpt.DisplayPath(e.Path), e.Format, units.FormatBytes(e.Size),
			e.ModTime.Local().Format("2006-01-02 15:04"), step, epoch, metrics, status)
	}
	tw.Flush()
}

// epochString shows a fractional epoch as recorded (HF Trainer's 0.96),
// a whole one as an integer.
func epochString(e *int64, v *float64) string {
	if v != nil && *v != float64(int64(*v)) {
		if s := strconv.FormatFloat(*v, 'f', 2, 64); !strings.HasSuffix(s, ".00") {
			return s
		}
		return strconv.FormatFloat(*v, 'g', 4, 64) // a fraction that rounds away
	}
	return optInt(e)
}

func metricsString(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	ks := slices.Sorted(maps.Keys(m))
	var parts []string
	for i, k := range ks {
		if i == 4 {
			parts = append(parts, fmt.Sprintf("+%d", len(ks)-4))
			break
		}
		parts = append(parts, fmt.Sprintf("%s=%.4g", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func renderReport(f *Factory, r *ckpt.Report, limit int) {
	w := f.IO.Out
	if r.Format == "" && !r.Valid {
		// Nothing was recognised: say so, rather than a report of zeros.
		size := ""
		if r.Size > 0 {
			size = " (" + units.FormatBytes(r.Size) + ")"
		}
		fmt.Fprintf(w, "%s: %s%s\n", ckpt.DisplayPath(r.Path), termsafe.String(r.Reason), size)
		return
	}
	status := "valid"
	if !r.Valid {
		status = "INVALID: " + termsafe.String(r.Reason)
	}
	layout := ""
	if r.Layout != "" {
		layout = " (" + r.Layout + ")"
	}
	fmt.Fprintf(w, "%s\n  format:    %s%s\n  status:    %s\n  size:      %s\n", ckpt.DisplayPath(r.Path), r.Format, layout, status, units.FormatBytes(r.Size))
	if r.Step != nil || r.Epoch != nil {
		fmt.Fprintf(w, "  step:      %s   epoch: %s\n", optInt(r.Step), epochString(r.Epoch, r.EpochValue))
	}
	if r.Run != "" {
		fmt.Fprintf(w, "  run:       %s\n", termsafe.String(r.Run))
	}
	if r.Incomplete != "" {
		fmt.Fprintf(w, "  note:      %s\n", termsafe.String(r.Incomplete))
	}
	fmt.Fprintf(w, "  tensors:   %d, %s (unique storage %s), %s\n", len(r.Tensors), units.FormatBytes(r.TensorBytes), units.FormatBytes(r.StorageBytes), units.Plural(int(r.Parameters), "parameter"))
	e := r.Resume
	fmt.Fprintf(w, "  resume:    ~%s on the GPU (parameters %s, gradients %s, optimizer %s, buffers %s; activations not included)\n",
		units.FormatBytes(e.Total), units.FormatBytes(e.Parameters), units.FormatBytes(e.Gradients), units.FormatBytes(e.Optimizer), units.FormatBytes(e.Buffers))
	fmt.Fprintf(w, "  read:      %s of %s\n", units.FormatBytes(r.BytesRead), units.FormatBytes(r.Size))
	if len(r.Scalars) > 0 {
		fmt.Fprintln(w, "\nSCALARS")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for i, k := range sortedScalarKeys(r.Scalars) {
			if limit > 0 && i == limit {
				fmt.Fprintf(tw, "  ... %d more (--limit 0 or --json)\n", len(r.Scalars)-limit)
				break
			}
			fmt.Fprintf(tw, "  %s\t%v\n", k, r.Scalars[k])
		}
		tw.Flush()
	}
	if len(r.Tensors) > 0 {
		fmt.Fprintln(w, "\nTENSORS")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for i, t := range r.Tensors {
			if limit > 0 && i == limit {
				fmt.Fprintf(tw, "  ... %d more (--limit 0 or --json)\n", len(r.Tensors)-limit)
				break
			}
			fmt.Fprintf(tw, "  %s\t%s\t%v\t%s\n", t.Path, t.DType, t.Shape, units.FormatBytes(t.Bytes))
		}
		tw.Flush()
	}
	if len(r.Globals) > 0 {
		fmt.Fprintf(w, "\nGLOBALS\n  %s\n", strings.Join(r.Globals, "\n  "))
	}
	if len(r.Findings) > 0 {
		fmt.Fprintf(w, "\nFINDINGS\n  %s\n", strings.Join(r.Findings, "\n  "))
	}
}

// renderLatest names the invalid checkpoints newer than the choice (all of
// them when there is none) on stderr and the choice on stdout.
func renderLatest(f *Factory, res *ckpt.LatestResult) {
	for _, s := range res.SkippedNewer {
		fmt.Fprintf(f.IO.ErrOut, "vramguard: skipped %s: %s\n", ckpt.DisplayPath(s.Path), termsafe.String(s.Reason))
	}
	if res.Disagreement != "" {
		fmt.Fprintf(f.IO.ErrOut, "vramguard: %s\n", termsafe.String(res.Disagreement))
	}
	if res.Best != nil {
		if res.Best.Incomplete != "" {
			fmt.Fprintf(f.IO.ErrOut, "vramguard: %s is %s\n", ckpt.DisplayPath(res.Best.Path), termsafe.String(res.Best.Incomplete))
		}
		fmt.Fprintln(f.IO.Out, ckpt.DisplayPath(res.Best.Path))
	}
}

func renderPlan(f *Factory, p *ckpt.PrunePlan) {
	w := f.IO.Out
	if len(p.Items) == 0 {
		fmt.Fprintln(w, "no checkpoints")
		renderLeftAlone(f, p)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tPATH\tSIZE\tSTEP\tEPOCH\tWHY")
	for _, it := range p.Items {
		action := "keep"
		if !it.Keep {
			action = "delete"
			if p.Applied {
				action = "deleted"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", action, ckpt.DisplayPath(it.Path), units.FormatBytes(it.Size), optInt(it.Step), epochString(it.Epoch, it.EpochValue), termsafe.String(strings.Join(it.Why, "; ")))
	}
	tw.Flush()
	renderLeftAlone(f, p)
	if p.Applied {
		fmt.Fprintf(w, "\nfreed %s\n", units.FormatBytes(p.FreedBytes))
	} else {
		fmt.Fprintf(w, "\ndry run: would free %s; add --apply to delete\n", units.FormatBytes(p.FreedBytes))
	}
}

// renderLeftAlone lists what prune did not take for a checkpoint.
func renderLeftAlone(f *Factory, p *ckpt.PrunePlan) {
	if len(p.LeftAlone) == 0 && p.OtherFiles == 0 {
		return
	}
	w := f.IO.Out
	fmt.Fprintln(w, "\nLEFT ALONE (prune never deletes these)")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, la := range p.LeftAlone {
		fmt.Fprintf(tw, "  %s\t%s\n", ckpt.DisplayPath(la.Path), termsafe.String(la.Why))
	}
	tw.Flush()
	if p.OtherFiles > 0 {
		s := "s"
		if p.OtherFiles == 1 {
			s = ""
		}
		fmt.Fprintf(w, "  and %d other file%s in no checkpoint format (logs, JSON, text, ...)\n", p.OtherFiles, s)
	}
}

func renderScan(f *Factory, rs []*ckpt.ScanResult) {
	w := f.IO.Out
	if len(rs) == 0 {
		fmt.Fprintln(w, "no pickles found")
		return
	}
	for _, r := range rs {
		verdict := "ok"
		switch r.Status {
		case ckpt.StatusDangerous:
			verdict = fmt.Sprintf("DANGEROUS (%d)", r.Dangerous)
		case ckpt.StatusUnknown:
			verdict = fmt.Sprintf("UNKNOWN GLOBALS (%d)", r.Unknown)
		case ckpt.StatusFailed:
			verdict = "FAILED (pickle not read to its end)"
		case ckpt.StatusNotUnderstood:
			verdict = "NOT UNDERSTOOD"
		case ckpt.StatusFramework:
			verdict = fmt.Sprintf("ok (framework classes, no code run: %d)", r.Framework)
			if !r.Safe {
				verdict = fmt.Sprintf("FRAMEWORK CLASSES (%d, --strict)", r.Framework)
			}
		case ckpt.StatusSkipped:
			fmt.Fprintf(w, "skipped  %s: %s\n", ckpt.DisplayPath(r.Path), r.Skipped)
			continue
		}
		format := r.Format
		if format == "" {
			format = "unknown format"
		}
		fmt.Fprintf(w, "%s  %s  [%s, %s]\n", verdict, ckpt.DisplayPath(r.Path), format, units.Plural(r.Pickles, "pickle"))
		for _, h := range r.Hits {
			if h.Verdict == ckpt.VerdictSafe {
				continue
			}
			fmt.Fprintf(w, "  %-9s %s  (%s at byte %d of %s) %s\n", h.Verdict, termsafe.String(h.Global), h.Opcode, h.Offset, termsafe.String(h.Record), termsafe.String(h.Reason))
		}
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  error: %s\n", termsafe.String(e))
		}
		for _, e := range r.NotUnderstood {
			fmt.Fprintf(w, "  not understood: %s\n", termsafe.String(e))
		}
	}
}

// progressBar draws verify --deep progress on stderr when it is a terminal.
type progressBar struct {
	w     io.Writer
	name  string
	total int64
	done_ int64
	last  time.Time
	now   func() time.Time
}

// progressMin is the file size below which no bar is drawn.
const progressMin = 64 << 20

func newProgressBar(f *Factory, path string) *progressBar {
	if f.IO.ErrOut != os.Stderr || !isTerminal(os.Stderr.Fd()) {
		return nil
	}
	total := int64(0)
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			filepath.Walk(path, func(_ string, info os.FileInfo, err error) error {
				if err == nil && info.Mode().IsRegular() {
					total += info.Size()
				}
				return nil
			})
		} else {
			total = st.Size()
		}
	}
	if total < progressMin {
		return nil
	}
	return &progressBar{w: f.IO.ErrOut, name: filepath.Base(path), total: total, now: f.Now}
}

func (b *progressBar) add(n int64) {
	b.done_ += n
	if t := b.now(); t.Sub(b.last) >= 100*time.Millisecond || b.done_ >= b.total {
		b.last = t
		b.draw()
	}
}

func (b *progressBar) draw() {
	frac := float64(b.done_) / float64(b.total)
	if frac > 1 {
		frac = 1
	}
	const width = 30
	fill := int(frac * width)
	fmt.Fprintf(b.w, "\r%s [%s%s] %3.0f%% %s/%s", b.name, strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
		frac*100, units.FormatBytesFixed(b.done_), units.FormatBytesFixed(b.total))
}

// done clears the bar; safe on a nil bar.
func (b *progressBar) done() {
	if b == nil {
		return
	}
	b.draw()
	fmt.Fprint(b.w, "\n")
}
