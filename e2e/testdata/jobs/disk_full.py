# Writes to /dev/full: the kernel answers ENOSPC, "No space left on device".
with open("/dev/full", "w") as f:
    f.write("checkpoint bytes")
    f.flush()
