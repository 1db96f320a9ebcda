# The PyTorch 1.x form of the same death (RuntimeError with the old numbers).
raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.90 GiB total capacity; "
                   "14.96 GiB already allocated; 9.75 MiB free; 15.08 GiB reserved in total by PyTorch)")
