# Prints the real message of a failure that needs hardware this machine lacks
# (NCCL, CUDA kernels, shared memory) and dies as PyTorch does: an uncaught
# exception carrying that message, exit status 1.
import sys

MESSAGES = {
    "nccl": ("torch.distributed.DistBackendError",
             "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\nncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error."),
    "cuda_error": ("RuntimeError",
                   "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1."),
    "fork": ("RuntimeError",
             "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method"),
    "shm": ("RuntimeError",
            "DataLoader worker (pid 4711) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit."),
    "cublas": ("RuntimeError", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
}
kind = sys.argv[1]
if kind == "shm":
    print("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).", file=sys.stderr, flush=True)
name, msg = MESSAGES[kind]
mod, _, cls = name.rpartition(".")
exc = type(cls, (Exception,), {"__module__": mod or "builtins"})
raise exc(msg)
