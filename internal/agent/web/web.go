// Package web holds the dashboard's assets, embedded in the binary so the
// agent serves them with no network access: the page, its script and
// stylesheet, and uPlot (MIT, vendored unmodified under static/vendor/uplot
// with its licence).
package web

import "embed"

// Assets is the static/ tree.
//
//go:embed static
var Assets embed.FS
