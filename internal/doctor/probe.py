# vramguard doctor's torch probe. It prints one JSON object on stdout and
# must never create a CUDA context: torch.cuda.is_available() is asked to use
# NVML (PYTORCH_NVML_BASED_CUDA_CHECK=1 is set by the caller), and nothing
# allocates on a device. Everything is best effort; a field that cannot be
# read is left out rather than failing the probe.
import glob
import json
import os
import sys
import time

out = {
    "executable": sys.executable,
    "python_version": "%d.%d.%d" % sys.version_info[:3],
    "prefix": sys.prefix,
    "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
}

try:
    import multiprocessing

    out["start_method"] = multiprocessing.get_start_method(allow_none=True) or (
        "fork" if sys.platform == "linux" and sys.version_info < (3, 14) else "forkserver"
    )
except Exception:  # noqa: BLE001
    pass

t0 = time.monotonic()
try:
    import torch
except BaseException as e:  # noqa: BLE001 - SystemExit and friends too
    out["importable"] = False
    out["import_error"] = "%s: %s" % (type(e).__name__, e)
else:
    out["importable"] = True
    out["import_seconds"] = round(time.monotonic() - t0, 3)
    out["version"] = str(torch.__version__)
    out["torch_file"] = getattr(torch, "__file__", "") or ""
    out["cuda"] = getattr(torch.version, "cuda", None) or ""
    out["hip"] = getattr(torch.version, "hip", None) or ""
    try:
        out["cudnn"] = int(torch.backends.cudnn.version() or 0)
    except Exception as e:  # noqa: BLE001
        out["cudnn_error"] = str(e)
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = int(torch.cuda.device_count()) if out["cuda_available"] else 0
        out["cuda_initialized"] = bool(torch.cuda.is_initialized())
    except Exception as e:  # noqa: BLE001
        out["cuda_error"] = str(e)

# Every libcudart this interpreter could load: torch's own directory, pip's
# nvidia-* wheels on sys.path, conda, LD_LIBRARY_PATH and the usual toolkits.
dirs = []
for p in sys.path:
    if p and os.path.isdir(p):
        dirs.append(os.path.join(p, "torch", "lib"))
        dirs.append(os.path.join(p, "nvidia", "cuda_runtime", "lib"))
for p in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
    if p:
        dirs.append(p)
for p in (os.environ.get("CONDA_PREFIX"), sys.prefix):
    if p:
        dirs.append(os.path.join(p, "lib"))
dirs += glob.glob("/usr/local/cuda*/lib64") + glob.glob("/usr/local/cuda*/targets/*/lib")
dirs += ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"]
seen = {}
for d in dirs:
    for f in glob.glob(os.path.join(d, "libcudart.so*")):
        real = os.path.realpath(f)
        if real not in seen:
            seen[real] = f
out["cudart_candidates"] = sorted(seen)

loaded = []
try:
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 6 and "libcudart" in parts[-1] and parts[-1] not in loaded:
                loaded.append(parts[-1])
except OSError:
    pass
out["cudart_loaded"] = loaded

sys.stdout.write(json.dumps(out))
sys.stdout.flush()
