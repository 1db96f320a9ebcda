package ckpt

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/vramguard/vramguard/internal/lazyre"
)

// lightningVersion is the suffix Lightning's ModelCheckpoint adds when a
// run restarted in the same folder would overwrite an earlier run's file:
// last.ckpt, then last-v1.ckpt, epoch=0-step=100-v1.ckpt, ...
var lightningVersion = lazyre.New(`-v([0-9]+)\.ckpt$`)

func lightningRun(e *Entry) (int, bool) {
	if e.Layout != "lightning" || filepath.Ext(e.Path) != ".ckpt" {
		return 0, false
	}
	if m := lightningVersion.FindStringSubmatch(filepath.Base(e.Path)); m != nil {
		n, err := strconv.Atoi(m[1])
		return n, err == nil
	}
	return 0, true
}

// preferNewestLightningRun: in a folder where Lightning restarted (files
// with -vN beside files without), step counts of different runs do not
// compare: a run restarted from scratch is at step 100 while the one
// before it reached 200. The newest run is the highest N; when its newest
// checkpoint is not the one picked by step, latest takes the newest
// run's and says that the two runs disagree.
func preferNewestLightningRun(valid []Entry, res *LatestResult) {
	if res.Best == nil {
		return
	}
	byDir := map[string][]int{}
	for i := range valid {
		if _, ok := lightningRun(&valid[i]); ok {
			d := filepath.Dir(valid[i].Path)
			byDir[d] = append(byDir[d], i)
		}
	}
	bestDir := filepath.Dir(res.Best.Path)
	idx := byDir[bestDir]
	if len(idx) == 0 {
		return
	}
	top, runs := -1, map[int]bool{}
	for _, i := range idx {
		n, _ := lightningRun(&valid[i])
		runs[n] = true
		top = max(top, n)
	}
	if len(runs) < 2 {
		return
	}
	var newest *Entry
	for _, i := range idx {
		if n, _ := lightningRun(&valid[i]); n == top && (newest == nil || Newer(&valid[i], newest)) {
			newest = &valid[i]
		}
	}
	if newest == nil || newest.Path == res.Best.Path {
		return
	}
	if n, _ := lightningRun(res.Best); n == top {
		return
	}
	res.Disagreement = fmt.Sprintf("Lightning restarted in %s: the newest run's (-v%d) newest checkpoint is %s (%s), an earlier run's is %s (%s); picked the newest run's",
		DisplayPath(bestDir), top, DisplayPath(filepath.Base(newest.Path)), counters(newest), DisplayPath(filepath.Base(res.Best.Path)), counters(res.Best))
	b := *newest
	res.Best = &b
}

func counters(e *Entry) string {
	switch {
	case e.Step != nil:
		return fmt.Sprintf("step %d", *e.Step)
	case e.Epoch != nil:
		return fmt.Sprintf("epoch %d", *e.Epoch)
	}
	return "modified " + e.ModTime.UTC().Format("2006-01-02 15:04:05")
}
