package cli

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/snapshot"
	"github.com/vramguard/vramguard/internal/termsafe"
	"github.com/vramguard/vramguard/internal/units"
)

// SnapshotOptions are the flags of `vramguard snapshot FILE`.
type SnapshotOptions struct {
	Path       string
	Sites      bool
	Segments   bool
	Trace      bool
	Since      time.Duration
	Device     int
	Site       string
	MinSize    string
	Action     string
	Limit      int
	JSON       bool
	ExportJSON string
	Serve      bool
	Addr       string
}

// NewCmdSnapshot is `vramguard snapshot`.
func NewCmdSnapshot(f *Factory) *cobra.Command {
	o := SnapshotOptions{Device: -1}
	cmd := &cobra.Command{
		Use:   "snapshot FILE [--sites|--segments|--trace] [--device N] [--json]",
		Short: "Read a PyTorch CUDA memory snapshot: totals, fragmentation, allocation sites, the OOM, the trace",
		Long: `snapshot reads a CUDA memory snapshot (torch.cuda.memory._dump_snapshot, the
C++ writer's _memory_snapshot_pickled, the same schema as JSON, or the page
torch's memory_viz writes with the snapshot embedded in it) without
Python and without running anything in it: a pickle that holds a global or
a call is refused as not a snapshot. Every schema torch has written is read
(1.13's list of segments to 2.3+'s allocator_settings).

With no table flag it prints, per device: reserved, allocated, active and
requested bytes; segments (large, small, expandable, private pools);
fragmentation (free bytes cached inside segments, the largest free block,
what the next large allocation can get without a new segment); the largest
allocation sites by live bytes (the innermost frame outside torch, as the
post-mortem charges them); and at an OOM what was asked for, what was free
and why it did not fit.

  --sites      every allocation site, by live bytes
  --segments   every segment: its blocks' bytes by state, its largest free block
  --trace      the allocator's events (alloc, free, segment map, oom) with
               their times and sites; --since, --site, --min-size, --action filter

--export-json OUT writes the snapshot as JSON in its own schema, which
torch's memory_viz reads as it reads the pickle. --serve draws it in the
browser (timeline, segment map, sites) on a loopback address, offline.

Compare two snapshots with 'vramguard snapshot diff A B'.

Exit status: 0 ok, 2 unreadable or not a snapshot.`,
		Example: `  vramguard snapshot oom.pickle
  vramguard snapshot oom.pickle --sites --device 0
  vramguard snapshot oom.pickle --trace --site train.py --min-size 1GiB
  vramguard snapshot oom.pickle --trace --since 2.5s --json | jq .events[0]
  vramguard snapshot oom.pickle --export-json oom.json
  vramguard snapshot diff step100.pickle step1000.pickle`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			o.Path = args[0]
			return runSnapshot(f, o)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&o.Sites, "sites", false, "list every allocation site by live bytes")
	fl.BoolVar(&o.Segments, "segments", false, "list every segment")
	fl.BoolVar(&o.Trace, "trace", false, "list the trace's events")
	fl.DurationVar(&o.Since, "since", 0, "--trace: only events this long after the device's first (e.g. 2.5s, 300ms)")
	fl.IntVar(&o.Device, "device", -1, "only this device (-1: every device)")
	fl.StringVar(&o.Site, "site", "", "--trace: only events whose site contains this text (file, file:line, function)")
	fl.StringVar(&o.MinSize, "min-size", "", "--trace: only events of at least this size (e.g. 1MiB, 2GB)")
	fl.StringVar(&o.Action, "action", "", "--trace: only events of this action (alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap, snapshot, oom)")
	fl.IntVar(&o.Limit, "limit", 30, "rows of a table (0: all), or sites in the summary (at most 10); --json lists all")
	fl.BoolVar(&o.JSON, "json", false, "print as JSON")
	fl.StringVar(&o.ExportJSON, "export-json", "", "write the snapshot as JSON in its own schema to OUT")
	fl.BoolVar(&o.Serve, "serve", false, "draw the snapshot in the browser, from a loopback address (printed)")
	fl.StringVar(&o.Addr, "addr", "127.0.0.1:0", "--serve: the address to listen on")
	cmd.AddCommand(newCmdSnapshotDiff(f))
	return cmd
}

func readSnapshot(f *Factory, path string) (*snapshot.Snapshot, error) {
	bar := newProgressBar(f, path)
	var progress func(int64)
	if bar != nil {
		var last int64
		progress = func(n int64) {
			bar.add(n - last)
			last = n
		}
	}
	s, err := snapshot.ReadFile(path, snapshot.DefaultLimits, progress)
	bar.done()
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	if s.Saturated > 0 {
		fmt.Fprintf(f.IO.ErrOut, "vramguard: %s: %s over 64 bits, each read as the nearest 64-bit value\n",
			path, units.Plural(s.Saturated, "integer"))
	}
	return s, nil
}

func runSnapshot(f *Factory, o SnapshotOptions) error {
	n := 0
	for _, b := range []bool{o.Sites, o.Segments, o.Trace} {
		if b {
			n++
		}
	}
	if n > 1 {
		return Usagef("--sites, --segments and --trace are separate tables: pick one")
	}
	if !o.Trace && (o.Since != 0 || o.Site != "" || o.MinSize != "" || o.Action != "") {
		return Usagef("--since, --site, --min-size and --action filter --trace")
	}
	if o.Limit < 0 {
		return Usagef("--limit %d: want 0 (all) or more", o.Limit)
	}
	var minSize int64
	if o.MinSize != "" {
		v, err := units.ParseBytes(o.MinSize)
		if err != nil {
			return Usagef("--min-size %q: %v", o.MinSize, err)
		}
		minSize = int64(v)
	}
	if o.Action != "" && snapshot.ParseAction(o.Action) == snapshot.ActionUnknown {
		return Usagef("--action %q: want one of alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap, snapshot, oom", o.Action)
	}
	s, err := readSnapshot(f, o.Path)
	if err != nil {
		return err
	}
	if o.Device >= 0 && o.Device >= len(s.Devices()) {
		return Usagef("--device %d: the snapshot covers %s", o.Device, units.Plural(len(s.Devices()), "device"))
	}
	if o.Since > 0 && !s.HasTimes {
		return Usagef("--since: this snapshot's trace has no times (torch %s writes none; 2.2 and later do)", s.Schema)
	}
	if o.ExportJSON != "" {
		if err := exportSnapshot(s, o.ExportJSON); err != nil {
			return err
		}
		if len(s.NotKept) > 0 {
			fmt.Fprintf(f.IO.ErrOut, "vramguard: --export-json: %s not written (over %s as JSON, or not plain data)\n",
				strings.Join(s.NotKept, ", "), units.FormatBytes(64<<20))
		}
		if !o.Sites && !o.Segments && !o.Trace && !o.JSON && !o.Serve {
			if s.Compact() {
				fmt.Fprintf(f.IO.Out, "wrote %s in the compact form (each frame and stack once; vramguard reads it, torch's memory_viz does not)\n", o.ExportJSON)
			} else {
				fmt.Fprintf(f.IO.Out, "wrote %s\n", o.ExportJSON)
			}
			return nil
		}
	}
	if o.Serve {
		return serveSnapshot(f, o, s)
	}
	switch {
	case o.Sites:
		return printSites(f, o, s)
	case o.Segments:
		return printSegments(f, o, s)
	case o.Trace:
		return printTrace(f, o, s, snapshot.TraceQuery{Device: o.Device, SinceUS: o.Since.Microseconds(),
			Site: o.Site, MinSize: minSize, Action: o.Action})
	}
	return printSummary(f, o, s)
}

func exportSnapshot(s *snapshot.Snapshot, path string) error {
	tmp := path + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return Failf("--export-json: %v", err)
	}
	err = snapshot.WriteJSON(out, s)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return Failf("--export-json %s: %v", path, err)
	}
	return nil
}

// snapshotJSON is the summary as --json prints it.
type snapshotJSON struct {
	File      string               `json:"file"`
	Schema    string               `json:"schema"`
	Saturated int                  `json:"saturated_integers"`
	Frames    int                  `json:"frames"`
	Stacks    int                  `json:"stacks"`
	Devices   []snapshotDeviceJSON `json:"devices"`
	Settings  []snapshot.Setting   `json:"allocator_settings,omitempty"`
	Metadata  string               `json:"user_metadata,omitempty"`
}

type snapshotDeviceJSON struct {
	snapshot.DeviceSummary
	TopSites []snapshot.Site `json:"top_sites"`
}

func newSnapshotJSON(o SnapshotOptions, s *snapshot.Snapshot) snapshotJSON {
	return snapshotJSON{File: o.Path, Schema: string(s.Schema), Saturated: s.Saturated, Frames: s.Frames,
		Stacks: s.Stacks, Settings: s.AllocatorSettings, Metadata: s.UserMetadata}
}

func printSummary(f *Factory, o SnapshotOptions, s *snapshot.Snapshot) error {
	sums := s.Summary(o.Device)
	if o.JSON {
		j := newSnapshotJSON(o, s)
		for _, d := range sums {
			j.Devices = append(j.Devices, snapshotDeviceJSON{d, firstRows(s.Sites(d.Device), 10)})
		}
		return f.WriteJSON(j)
	}
	w := f.IO.Out
	events := 0
	for _, tr := range s.Traces {
		events += len(tr)
	}
	fmt.Fprintf(w, "%s: torch %s schema, %s, %s, %s; %s in %s\n", termsafe.String(filepath.Base(o.Path)),
		schemaName(s.Schema), units.Plural(len(s.Devices()), "device"), units.Plural(len(s.Segments), "segment"),
		units.Plural(events, "trace event"), units.Plural(s.Frames, "frame"), units.Plural(s.Stacks, "stack"))
	for _, d := range sums {
		fmt.Fprintf(w, "\ndevice %d\n", d.Device)
		if d.Segments == 0 && len(d.Trace) == 0 {
			fmt.Fprintln(w, "  nothing recorded")
			continue
		}
		kinds := []string{fmt.Sprintf("%d large", d.Large), fmt.Sprintf("%d small", d.Small)}
		if d.Expandable > 0 {
			kinds = append(kinds, fmt.Sprintf("%d expandable", d.Expandable))
		}
		if d.PrivatePool > 0 {
			kinds = append(kinds, fmt.Sprintf("%d in private pools", d.PrivatePool))
		}
		fmt.Fprintf(w, "  reserved   %-10s in %s (%s)\n", units.FormatBytes(d.Reserved),
			units.Plural(d.Segments, "segment"), strings.Join(kinds, ", "))
		fmt.Fprintf(w, "  allocated  %-10s in %s, %s requested\n", units.FormatBytes(d.Allocated),
			units.Plural(d.LiveBlocks, "live block"), units.FormatBytes(d.Requested))
		fmt.Fprintf(w, "  active     %-10s (%s freed, waiting on a stream)\n", units.FormatBytes(d.Active),
			units.FormatBytes(d.PendingFree))
		fmt.Fprintf(w, "  free       %-10s cached in %s; largest %s, large pool %s (the most the next large allocation gets without a new segment)\n",
			units.FormatBytes(d.Free), units.Plural(d.FreeBlocks, "block"), units.FormatBytes(d.LargestFree),
			units.FormatBytes(d.LargestFreeLarge))
		if d.Saturated {
			fmt.Fprintf(w, "  note       a sum passed %s and stopped there: these sizes are no real allocator's\n",
				units.FormatBytes(math.MaxInt64))
		}
		if len(d.Trace) > 0 {
			var parts []string
			for _, a := range d.Trace {
				parts = append(parts, fmt.Sprintf("%d %s", a.Count, a.Action))
			}
			fmt.Fprintf(w, "  trace      %s\n", strings.Join(parts, ", "))
		}
		if d.OOM != nil {
			fmt.Fprintf(w, "  OOM        asked for %s at %s; the device had %s free\n", units.FormatBytes(d.OOM.Size),
				termsafe.String(d.OOM.Site), units.FormatBytes(d.OOM.DeviceFree))
			at := d.OOM.At
			when := "the last before the dump"
			if at.Undone > 0 {
				when = fmt.Sprintf("the dump came %s later", units.Plural(at.Undone, "event"))
			}
			fmt.Fprintf(w, "             at the OOM (trace event %d, %s): reserved %s, allocated %s, %s pending free, %s free in the cache\n",
				at.Index, when, units.FormatBytes(at.Reserved), units.FormatBytes(at.Allocated),
				units.FormatBytes(at.PendingFree), units.FormatBytes(at.CachedFree))
			fmt.Fprintf(w, "             %s\n", d.OOM.Reason)
		}
		sites := s.Sites(d.Device)
		if len(sites) == 0 {
			continue
		}
		n := 10
		if o.Limit > 0 && o.Limit < n {
			n = o.Limit
		}
		top := firstRows(sites, n)
		fmt.Fprintf(w, "  top allocation sites by live bytes (%d of %d; --sites lists all)\n", len(top), len(sites))
		rows := siteRows(top)
		for _, r := range rows {
			fmt.Fprintf(w, "    %10s  %6s  %s\n", r[0], r[2], r[3])
		}
	}
	return nil
}

func schemaName(s snapshot.Schema) string {
	if s == snapshot.Schema23 {
		return "2.3+"
	}
	return string(s)
}

// firstRows is the first n of rows (all of them when n is 0 or less:
// --limit 0 shows all).
func firstRows[T any](rows []T, n int) []T {
	if n > 0 && len(rows) > n {
		return rows[:n]
	}
	return rows
}

func siteRows(sites []snapshot.Site) [][]string {
	var rows [][]string
	for _, st := range sites {
		site := termsafe.String(st.Site)
		if st.OOMBytes > 0 {
			site = fmt.Sprintf("(OOM: %s asked here) %s", units.FormatBytes(st.OOMBytes), site)
		}
		rows = append(rows, []string{units.FormatBytes(st.Bytes), units.FormatBytes(st.Requested),
			strconv.Itoa(st.Blocks), site})
	}
	return rows
}

func printSites(f *Factory, o SnapshotOptions, s *snapshot.Snapshot) error {
	cols := []column{{Header: "BYTES", Right: true, Always: true}, {Header: "REQUESTED", Right: true, Keep: 2},
		{Header: "BLOCKS", Right: true, Keep: 1}, {Header: "SITE", Always: true, Min: 20}}
	return printListing(f, o, s.SiteTable(o.Device), func(sites []snapshot.Site) any {
		return struct {
			File  string          `json:"file"`
			Sites []snapshot.Site `json:"sites"`
		}{o.Path, sites}
	}, cols, siteRows)
}

// printListing prints one of the snapshot's listings: with --json the
// document doc makes of all the rows (an empty list, never null), else the
// first --limit of them as a table of cols (cells being their cells) and
// how many were left out.
func printListing[T any](f *Factory, o SnapshotOptions, rows []T, doc func([]T) any, cols []column, cells func([]T) [][]string) error {
	if o.JSON {
		return f.WriteJSON(doc(emptyIfNil(rows)))
	}
	shown := firstRows(rows, o.Limit)
	if err := renderTable(f.IO.Out, f.termWidth(), cols, cells(shown)); err != nil {
		return err
	}
	return moreRows(f.IO.Out, len(shown), len(rows))
}

func moreRows(w io.Writer, shown, total int) error {
	if shown < total {
		_, err := fmt.Fprintf(w, "(%d of %d; --limit 0 shows all)\n", shown, total)
		return err
	}
	return nil
}

func printSegments(f *Factory, o SnapshotOptions, s *snapshot.Snapshot) error {
	cols := []column{{Header: "DEV", Right: true, Keep: 3}, {Header: "ADDRESS", Always: true}, {Header: "TYPE", Keep: 2},
		{Header: "TOTAL", Right: true, Always: true}, {Header: "ALLOCATED", Right: true, Always: true},
		{Header: "ACTIVE", Right: true, Keep: 4}, {Header: "FREE", Right: true, Always: true},
		{Header: "LARGEST FREE", Right: true, Keep: 1}, {Header: "BLOCKS", Right: true, Keep: 5},
		{Header: "SITE", Keep: 6, Min: 16}}
	return printListing(f, o, s.SegmentRows(o.Device), func(segs []snapshot.SegmentRow) any {
		return struct {
			File     string                `json:"file"`
			Segments []snapshot.SegmentRow `json:"segments"`
		}{o.Path, segs}
	}, cols, func(shown []snapshot.SegmentRow) [][]string {
		var rows [][]string
		for _, r := range shown {
			typ := r.Type
			if r.Expandable {
				typ += ",expandable"
			}
			if r.Pool != [2]int64{} {
				typ += fmt.Sprintf(",pool(%d,%d)", r.Pool[0], r.Pool[1])
			}
			rows = append(rows, []string{strconv.Itoa(r.Device), fmt.Sprintf("%#x", r.Address), typ,
				units.FormatBytes(r.Total), units.FormatBytes(r.Allocated), units.FormatBytes(r.Active),
				units.FormatBytes(r.Free), units.FormatBytes(r.LargestFree), strconv.Itoa(r.Blocks), termsafe.String(r.Site)})
		}
		return rows
	})
}

func printTrace(f *Factory, o SnapshotOptions, s *snapshot.Snapshot, q snapshot.TraceQuery) error {
	if len(s.Traces) == 0 {
		return Usagef("--trace: this snapshot has no trace (torch %s wrote none; record one with torch.cuda.memory._record_memory_history())", s.Schema)
	}
	cols := []column{{Header: "DEV", Right: true, Keep: 3}, {Header: "#", Right: true, Keep: 2},
		{Header: "TIME", Right: true, Always: true}, {Header: "ACTION", Always: true},
		{Header: "SIZE", Right: true, Always: true}, {Header: "ADDRESS", Keep: 1}, {Header: "SITE", Keep: 4, Min: 16}}
	return printListing(f, o, s.Trace(q), func(events []snapshot.TraceRow) any {
		return struct {
			File     string              `json:"file"`
			HasTimes bool                `json:"has_times"`
			Events   []snapshot.TraceRow `json:"events"`
		}{o.Path, s.HasTimes, events}
	}, cols, func(shown []snapshot.TraceRow) [][]string {
		var rows [][]string
		for _, e := range shown {
			t := "-"
			if s.HasTimes {
				t = "+" + fmtOffset(e.OffsetUS)
			}
			addr := fmt.Sprintf("%#x", e.Addr)
			if e.Action == "oom" {
				addr = units.FormatBytes(e.DeviceFree) + " free"
			}
			rows = append(rows, []string{strconv.Itoa(e.Device), strconv.Itoa(e.Index), t, e.Action,
				units.FormatBytes(e.Size), addr, termsafe.String(e.Site)})
		}
		return rows
	})
}

// fmtOffset writes microseconds since the trace began: 12.345ms, 1.5s.
func fmtOffset(us int64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%dµs", us)
	case us < 1_000_000:
		return fmt.Sprintf("%.3fms", float64(us)/1e3)
	}
	return fmt.Sprintf("%.3fs", float64(us)/1e6)
}

func newCmdSnapshotDiff(f *Factory) *cobra.Command {
	var asJSON bool
	limit := 20
	cmd := &cobra.Command{
		Use:   "diff A B [--json]",
		Short: "Growth by allocation site between two snapshots: the leak first",
		Long: `diff compares the live memory of two snapshots of one job (step 100 and step
1000, say) by allocation site: the site that grew most comes first, then
the rest down to the one that shrank most; each is marked new (only in B),
vanished (only in A), grew, shrank or same. Per device it shows how
reserved and allocated bytes and the segment count changed.`,
		Example: `  vramguard snapshot diff step100.pickle step1000.pickle
  vramguard snapshot diff a.pickle b.pickle --json | jq '.sites[0]'`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			return runSnapshotDiff(f, args[0], args[1], limit, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.Flags().IntVar(&limit, "limit", limit, "sites to show (0: all); --json lists all")
	return cmd
}

func runSnapshotDiff(f *Factory, pa, pb string, limit int, asJSON bool) error {
	if limit < 0 {
		return Usagef("--limit %d: want 0 (all) or more", limit)
	}
	a, err := readSnapshot(f, pa)
	if err != nil {
		return err
	}
	b, err := readSnapshot(f, pb)
	if err != nil {
		return err
	}
	d := snapshot.Compare(a, b)
	if asJSON {
		return f.WriteJSON(struct {
			A string `json:"a"`
			B string `json:"b"`
			snapshot.Diff
		}{pa, pb, d})
	}
	w := f.IO.Out
	fmt.Fprintf(w, "%s -> %s\n", termsafe.String(filepath.Base(pa)), termsafe.String(filepath.Base(pb)))
	for _, dd := range d.Devices {
		fmt.Fprintf(w, "device %d  reserved %s -> %s (%s), allocated %s -> %s (%s), segments %d -> %d\n", dd.Device,
			units.FormatBytes(dd.ReservedA), units.FormatBytes(dd.ReservedB), signedBytes(dd.ReservedB-dd.ReservedA),
			units.FormatBytes(dd.AllocatedA), units.FormatBytes(dd.AllocatedB), signedBytes(dd.AllocatedB-dd.AllocatedA),
			dd.SegmentsA, dd.SegmentsB)
	}
	fmt.Fprintln(w)
	shown := d.Sites
	if limit > 0 && len(shown) > limit {
		shown = shown[:limit]
	}
	var rows [][]string
	for _, s := range shown {
		rows = append(rows, []string{signedBytes(s.Delta), units.FormatBytes(s.BytesA), units.FormatBytes(s.BytesB),
			fmt.Sprintf("%d -> %d", s.BlocksA, s.BlocksB), s.Status, termsafe.String(s.Site)})
	}
	cols := []column{{Header: "GROWTH", Right: true, Always: true}, {Header: "A", Right: true, Keep: 2},
		{Header: "B", Right: true, Always: true}, {Header: "BLOCKS", Right: true, Keep: 1},
		{Header: "STATUS", Always: true}, {Header: "SITE", Always: true, Min: 20}}
	if err := renderTable(w, f.termWidth(), cols, rows); err != nil {
		return err
	}
	return moreRows(w, len(shown), len(d.Sites))
}

func signedBytes(n int64) string {
	if n > 0 {
		return "+" + units.FormatBytes(n)
	}
	return units.FormatBytes(n)
}
