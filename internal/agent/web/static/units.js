"use strict";

// What the dashboard pages share (index.html and snapshot.html load it first).

// fmtBytes writes bytes as vramguard's CLI does (units.FormatBytes): binary
// units, about three significant digits, "3 MiB", "1.6 GiB", "504 GiB".
function fmtBytes(v) {
  if (v === undefined || v === null || Number.isNaN(v)) return "?";
  const sign = v < 0 ? "-" : "";
  v = Math.abs(v);
  if (Math.round(v) < 1024) return (Math.round(v) === 0 ? "" : sign) + Math.round(v) + " B";
  const suffixes = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  let e = 0;
  while (v >= 1024 && e < suffixes.length - 1) { v /= 1024; e++; }
  const round = (x) => (x < 100 ? Math.round(x * 10) / 10 : Math.round(x));
  let r = round(v);
  if (r >= 1024 && e < suffixes.length - 1) { v /= 1024; e++; r = round(v); }
  return sign + r + " " + suffixes[e];
}
