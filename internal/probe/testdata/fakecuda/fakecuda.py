"""A fake torch.cuda for testing vramguard's probe without a GPU.

install() replaces, on the real (CPU-only) torch.cuda, the functions the
probe calls with ones that replay a recording of memory_stats()
dictionaries (memory_stats/*.json). init() plays the job initialising CUDA:
it flips is_initialized() and runs the calls queued with torch.cuda._lazy_call
(except torch's own device checks, which would need a GPU). oom() plays the
caching allocator running out: it calls an attached OOM observer, if any, and
raises torch.cuda.OutOfMemoryError with a real allocator message.

Every call the probe makes is appended to the JSON-lines log at
$FAKECUDA_LOG so a test can check what was (and was not) called.
"""

import json
import os
import pickle
import sys
import threading

import torch
import torch.cuda
import torch.cuda.memory

_state = None


class _State:
    def __init__(self, recording, observer):
        with open(recording) as f:
            self.rec = json.load(f)
        self.samples = self.rec["samples"]
        self.unused = set(self.rec.get("unused_devices", []))
        self.i = 0
        # The row memory_stats last handed out, per thread: the probe's
        # sampler and an OOM handler in the main thread may interleave.
        self.tls = threading.local()
        self.initialized = False
        self.observer_api = observer
        self.observers = []
        self.calls = 0
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.log_path = os.environ.get("FAKECUDA_LOG", "")
        self.history = None
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "snapshot.json")) as f:
            self.snapshot = json.load(f)

    def log(self, **kw):
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(kw) + "\n")

    def current(self):
        return self.samples[min(self.i, len(self.samples) - 1)]


def install(recording, observer=False):
    global _state
    _state = _State(recording, observer)
    tc = torch.cuda
    mem = torch.cuda.memory
    for mod in (tc, mem):
        mod.is_initialized = is_initialized
        mod.memory_stats = memory_stats
        mod.mem_get_info = mem_get_info
        mod.memory_summary = memory_summary
    tc.device_count = device_count
    mem._record_memory_history = _record_memory_history
    mem._snapshot = _snapshot
    mem._dump_snapshot = _dump_snapshot
    if observer:
        torch._C._cuda_attach_out_of_memory_observer = _attach_observer
    elif hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
        delattr(torch._C, "_cuda_attach_out_of_memory_observer")


def init():
    """The job initialises CUDA."""
    _state.initialized = True
    _state.log(call="init")
    queued = list(torch.cuda._queued_calls)
    torch.cuda._queued_calls.clear()
    for fn, _tb in queued:
        if getattr(fn, "__module__", "").startswith("torch"):
            continue  # torch's capability checks need a real device
        fn()


def wait_samples(n, timeout=20.0):
    """Block until memory_stats has been called n times (by the probe's
    sampler); returns False on timeout."""
    with _state.cond:
        return _state.cond.wait_for(lambda: _state.calls >= n, timeout)


def oom(alloc=2 * (1 << 30)):
    """The allocator fails to allocate `alloc` bytes on device 0."""
    st = _state
    free, total = st.current()["mem_get_info"]
    st.log(call="oom", alloc=alloc)
    for cb in list(st.observers):
        cb(0, alloc, total, free)
    raise torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.20 GiB total capacity; "
        "49.21 GiB already allocated; 1.31 GiB free; 78.23 GiB reserved in total by PyTorch) "
        "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
        "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
    )


# -- the fake API -----------------------------------------------------------


def is_initialized():
    return _state.initialized


def device_count():
    _state.log(call="device_count")
    return _state.rec["device_count"]


def _dev(device):
    if device is None:
        return 0
    return int(getattr(device, "index", device) or 0)


def memory_stats(device=None):
    st = _state
    d = _dev(device)
    if not st.initialized:
        return {}
    if d in st.unused:
        return {k: 0 for k in st.samples[0]["memory_stats"]}
    with st.cond:
        row = st.current()
        st.tls.last = min(st.i, len(st.samples) - 1)
        st.log(call="memory_stats", device=d, index=st.tls.last)
        st.i += 1
        st.calls += 1
        st.cond.notify_all()
    return dict(row["memory_stats"])


def mem_get_info(device=None):
    st = _state
    d = _dev(device)
    st.log(call="mem_get_info", device=d)
    if not st.initialized:
        raise RuntimeError("fakecuda: mem_get_info before CUDA init would create a context")
    return tuple(st.samples[getattr(st.tls, "last", 0)]["mem_get_info"])


def memory_summary(device=None, abbreviated=False):
    st = _state
    s = st.current()["memory_stats"]
    st.log(call="memory_summary", device=_dev(device))
    lines = [
        "|" + "=" * 75 + "|",
        "|                  PyTorch CUDA memory summary, device ID %d                 |" % _dev(device),
        "|" + "-" * 75 + "|",
        "| Allocated memory      | %d bytes" % s["allocated_bytes.all.current"],
        "| Reserved memory       | %d bytes" % s["reserved_bytes.all.current"],
        "| Non-releasable memory | %d bytes" % s["inactive_split_bytes.all.current"],
        "|" + "=" * 75 + "|",
    ]
    return "\n".join(lines) + "\n"


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None):
    _state.history = dict(enabled=enabled, context=context, stacks=stacks, max_entries=max_entries)
    _state.log(call="_record_memory_history", **_state.history)


def _snapshot(device=None):
    if _state.history is None:
        return {"segments": [], "device_traces": []}
    return _state.snapshot


def _dump_snapshot(filename="dump_snapshot.pickle"):
    _state.log(call="_dump_snapshot")
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def _attach_observer(cb):
    _state.log(call="attach_oom_observer")
    _state.observers.append(cb)
