# Dies the way a PyTorch 2.x job dies of a CUDA OOM: torch raises
# torch.OutOfMemoryError with the allocator's numbers and the process exits 1.
import torch
print("step 1 loss 2.31", flush=True)
# torch >= 2.1 names it torch.OutOfMemoryError; older releases torch.cuda.OutOfMemoryError.
OOM = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
raise OOM(
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free. "
    "Process 4242 has 78.08 GiB memory in use. Of the allocated memory 71.20 GiB is allocated by PyTorch, and "
    "6.35 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
