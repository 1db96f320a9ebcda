# Grows host memory until the kernel's OOM killer ends it.
import sys
chunks = []
print("allocating", flush=True)
while True:
    chunks.append(bytearray(16 << 20))
