"""The `%vramguard` line magic: one IPython Magics class over the notebook
side's modules (cells, holders, free, autosave). Every subcommand prints and
returns None, so nothing it reports is kept in Out."""

import json
import os
import shlex
import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from . import _config, _cuda, _probe, _state, _wire, autosave, cells, free, holders
from ._units import parse_duration, parse_size, signed, size

USAGE = """%vramguard [SUBCOMMAND]: memory inside this notebook.

  %vramguard                      status: devices, memory, run, probe, autosave
  %vramguard quiet | verbose      no line after cells | a line after every cell
  %vramguard threshold SIZE       a line after cells that move memory by more (default 64MiB)
  %vramguard cells [--json]       this session's cells, sorted by growth
  %vramguard who [--all] [--json] live tensors by what holds them, largest first
  %vramguard free [--out] [--tb] [--cache] [--json]
                                  release the output cache, the last exception,
                                  then gc.collect() and empty_cache() (all by default)
  %vramguard autosave NAME... [--every 10m] [--dir DIR] [--keep 3]
  %vramguard autosave off | status
                                  save NAME's state_dict()s atomically, every 10 minutes
  %vramguard restore [FILE|DIR]   load the newest autosave into the live objects
                                  (no argument: the newest autosave of an earlier kernel)
  %vramguard --help               this text
"""

WHO_ROWS = 10  # rows per holder without --all


def _flags(args, allowed, values=()):
    """Split args into (flags set, {option: value}, positional); one-line
    UsageError for anything else."""
    flags, opts, pos = set(), {}, []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            name, eq, val = a.partition("=")
            if name in values:
                if not eq:
                    i += 1
                    if i >= len(args):
                        raise UsageError("%s needs a value" % name)
                    val = args[i]
                opts[name] = val
            elif name in allowed and not eq:
                flags.add(name)
            else:
                raise UsageError("unknown option %s (see %%vramguard --help)" % a)
        else:
            pos.append(a)
        i += 1
    return flags, opts, pos


@magics_class
class VramguardMagics(Magics):
    def __init__(self, shell, side):
        super().__init__(shell)
        self.side = side

    @line_magic
    def vramguard(self, line):
        try:
            args = shlex.split(line)
        except ValueError as e:
            raise UsageError("cannot parse %r: %s" % (line, e)) from None
        if not args:
            return self.status()
        cmd, rest = args[0], args[1:]
        if cmd in ("--help", "-h", "help"):
            print(USAGE, end="")
            return None
        fn = getattr(self, "cmd_" + cmd, None)
        if fn is None:
            raise UsageError("unknown subcommand %r (see %%vramguard --help)" % cmd)
        fn(rest)
        return None

    vramguard.__doc__ = USAGE

    # tracker --------------------------------------------------------------

    def cmd_quiet(self, rest):
        self._noargs("quiet", rest)
        self.side.tracker.mode = "quiet"
        print("vramguard: no line after cells (%vramguard verbose or threshold SIZE to bring it back)")

    def cmd_verbose(self, rest):
        self._noargs("verbose", rest)
        self.side.tracker.mode = "verbose"
        print("vramguard: a line after every cell")

    def cmd_threshold(self, rest):
        if len(rest) != 1:
            raise UsageError("usage: %vramguard threshold SIZE (e.g. 64MiB)")
        try:
            n = parse_size(rest[0])
        except ValueError as e:
            raise UsageError(str(e)) from None
        t = self.side.tracker
        t.threshold, t.mode = n, "default"
        print("vramguard: a line after cells that move memory by more than %s, or raise" % size(n))

    def cmd_cells(self, rest):
        flags, _, pos = _flags(rest, {"--json"})
        if pos:
            raise UsageError("usage: %vramguard cells [--json]")
        recs = sorted(self.side.tracker.cells, key=lambda r: -cells.growth(r))
        if "--json" in flags:
            print(json.dumps({"cells": recs}))
            return
        if not recs:
            print("vramguard: no cells tracked yet")
            return
        rows = [("CELL", "TIME", "GPU ALLOC", "GPU PEAK", "RESERVED", "HOST", "HOST PEAK", "ERROR", "FIRST LINE")]
        for r in recs:
            cu = r.get("cuda", ())
            rows.append((
                "In[%d]" % r["execution_count"], cells.duration(r["seconds"]),
                signed(sum(x["allocated_delta"] for x in cu)) if cu else "-",
                signed(max(x["allocated_peak_delta"] for x in cu)) if cu else "-",
                size(sum(x["reserved_bytes"] for x in cu)) if cu else "-",
                signed(r["rss_delta"]), signed(r["rss_peak_delta"]), r.get("error", ""), r["first_line"][:60],
            ))
        _table(rows)

    # who and free -----------------------------------------------------------

    def cmd_who(self, rest):
        flags, _, pos = _flags(rest, {"--json", "--all"})
        if pos:
            raise UsageError("usage: %vramguard who [--all] [--json]")
        rep = holders.scan(self.shell)
        if "--json" in flags:
            print(json.dumps(rep))
            return
        if sys.modules.get("torch") is None:
            print("vramguard: torch is not imported: no tensors")
            return
        n = sum(len(g["tensors"]) for g in rep["groups"])
        per_dev = {}
        for g in rep["groups"]:
            for r in g["tensors"]:
                per_dev[r["device"]] = per_dev.get(r["device"], 0) + r["bytes"]
        print("vramguard: %d storages (%s), scanned in %s" % (
            n, ", ".join("%s on %s" % (size(b), d) for d, b in sorted(per_dev.items())) or "none",
            cells.duration(rep["seconds"])))
        rows = [("HOLDER", "SIZE", "DEVICE", "DTYPE", "SHAPE", "CELL")]
        for g in rep["groups"]:
            ts = g["tensors"]
            if len(ts) > 1 or ts[0]["path"] != g["holder"]:
                rows.append((g["holder"], size(g["bytes"]), "", "", "%d storages" % len(ts), ""))
                ind = "  "
            else:
                ind = ""
            shown = ts if "--all" in flags else ts[:WHO_ROWS]
            for r in shown:
                path = r["path"]
                if r.get("also"):
                    path += " (also " + ", ".join(r["also"]) + ")"
                rows.append((ind + path, size(r["bytes"]), r["device"], r["dtype"],
                             "[" + ", ".join(str(x) for x in r["shape"]) + "]", r.get("cell", "")))
            if len(shown) < len(ts):
                more = ts[len(shown):]
                rows.append((ind + "... %d more (--all)" % len(more), size(sum(r["bytes"] for r in more)), "", "", "", ""))
        if len(rows) > 1:
            _table(rows)
        for c in rep["cuda"]:
            print("%s: allocated %s = named above %s + no Python name reaches %s (autograd graph of a kept tensor, "
                  "library workspaces); reserved %s: cache %s (empty_cache() returns it)" % (
                      c["device"], size(c["allocated_bytes"]), size(c["named_bytes"]), size(c["unnamed_bytes"]),
                      size(c["reserved_bytes"]), size(c["cache_bytes"])))
        print("cpu: named above %s of the kernel's RSS %s" % (size(rep["cpu_named_bytes"]), size(free._rss())))

    def cmd_free(self, rest):
        flags, _, pos = _flags(rest, {"--out", "--tb", "--cache", "--json"})
        if pos:
            raise UsageError("usage: %vramguard free [--out] [--tb] [--cache] [--json]")
        some = flags & {"--out", "--tb", "--cache"}
        steps = free.free(self.shell, out="--out" in flags or not some, tb="--tb" in flags or not some,
                          cache="--cache" in flags or not some)
        if "--json" in flags:
            print(json.dumps({"steps": steps}))
            return
        names = {"out": "output cache", "tb": "last exception", "gc": "gc.collect()", "empty_cache": "empty_cache()"}
        rows = [("STEP", "WHAT", "GPU ALLOCATED", "RESERVED", "HOST")]
        cuda = bool(_cuda.totals())
        tot = [0, 0, 0]
        for s in steps:
            rows.append((names[s["step"]], s["what"], _freed(s["allocated_freed"], cuda),
                         _freed(s["reserved_freed"], cuda), _freed(s["host_freed"], True)))
            tot[0] += s["allocated_freed"]
            tot[1] += s["reserved_freed"]
            tot[2] += s["host_freed"]
        rows.append(("total", "", _freed(tot[0], cuda), _freed(tot[1], cuda), _freed(tot[2], True)))
        print("vramguard: free (named variables are kept)")
        _table(rows)

    # autosave -------------------------------------------------------------

    def cmd_autosave(self, rest):
        a = self.side.autosave
        if rest in (["off"], ["status"]) or not rest:
            if rest == ["off"]:
                a.off()
            print("vramguard: " + a.status())
            return
        _, opts, names = _flags(rest, set(), values=("--every", "--dir", "--keep"))
        if not names:
            raise UsageError("usage: %vramguard autosave NAME... [--every 10m] [--dir DIR] [--keep 3]")
        try:
            every = parse_duration(opts.get("--every", "10m"))
            keep = int(opts.get("--keep", autosave.DEFAULT_KEEP))
            if keep < 1:
                raise ValueError("--keep must be 1 or more")
        except ValueError as e:
            raise UsageError(str(e)) from None
        try:
            warning = a.configure(names, every, opts.get("--dir", "vramguard-autosave"), keep)
        except autosave.AutosaveError as e:
            raise UsageError("autosave: %s" % e) from None
        if warning:
            sys.stderr.write("vramguard: warning: %s\n" % warning)
            sys.stderr.flush()
        print("vramguard: " + a.status())

    def cmd_restore(self, rest):
        if len(rest) > 1:
            raise UsageError("usage: %vramguard restore [FILE|DIR]")
        path = rest[0] if rest else self.side.last_autosave
        if not path:
            raise UsageError("restore: no FILE or DIR given, and no earlier kernel of this notebook left an "
                             "autosave (%s is unset)" % autosave.ENV_LAST)
        try:
            lines = autosave.restore(self.shell, os.path.expanduser(path), notebook=self.side.notebook)
        except autosave.AutosaveError as e:
            raise UsageError("restore: %s" % e) from None
        print("vramguard: " + "\n".join(lines))

    # status ---------------------------------------------------------------

    def status(self):
        side = self.side
        p = _state.p
        run_id = (p.cfg.run_id if p is not None else "") or os.environ.get(_config.ENV_RUN_ID, "")
        if p is None:
            probe = "not running (%load_ext vramguard starts it)"
        elif p.failed:
            probe = "stopped after an internal error"
        elif _wire.alive(p.conn):
            probe = "sending to %s" % p.cfg.socket_path
        elif p.agent_path:
            probe = "sending to the agent at %s" % p.agent_path
        else:
            probe = "running, no vramguard socket to send to (%s)" % (p.cfg.socket_path or "none")
        lines = ["vramguard %s: kernel PID %d%s" % (_probe.VERSION, os.getpid(), ", run " + run_id if run_id else ", no run (not under vramguard run --kernel)")]
        lines.append("probe: " + probe)
        torch = sys.modules.get("torch")
        tot = _cuda.totals()
        if tot:
            for d, (a, r) in sorted(tot.items()):
                lines.append("cuda:%d: allocated %s, reserved %s" % (d, size(a), size(r)))
        elif torch is None:
            lines.append("devices: torch not imported (host figures only)")
        else:
            lines.append("devices: CUDA not initialised (host figures only)")
        lines.append("host: kernel RSS %s" % size(free._rss()))
        t = side.tracker
        mode = {"quiet": "quiet", "verbose": "a line after every cell"}.get(
            t.mode, "a line after cells over %s or that raise" % size(t.threshold))
        lines.append("cells: %d tracked; %s; host peak by %s" % (
            len(t.cells), mode, {"hwm": "VmHWM", "sampler": "a sampler"}.get(t.host.mode, "VmHWM (or a sampler)")))
        lines.append(side.autosave.status())
        if side.last_autosave:
            lines.append("an earlier kernel's newest autosave: %s (%%vramguard restore)" % side.last_autosave)
        print("\n".join(lines))
        print()
        print(USAGE, end="")

    def _noargs(self, cmd, rest):
        if rest:
            raise UsageError("%%vramguard %s takes no arguments" % cmd)


def _freed(n, show):
    if not show:
        return "-"
    return "%s freed" % size(n) if n >= 0 else "%s more" % size(-n)


def _table(rows):
    w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip())
