# Writes N MB in bursts of numbered lines as fast as it can, then SIGKILLs
# itself without flushing anything else.
import os, signal, sys
total = int(sys.argv[1]) << 20
line = 0
written = 0
out = sys.stdout.buffer
while written < total:
    chunk = b"".join(b"line %09d %s\n" % (line + i, b"x" * 80) for i in range(1000))
    line += 1000
    out.write(chunk)
    written += len(chunk)
out.flush()
sys.stderr.write("wrote %d lines\n" % line)
sys.stderr.flush()
os.kill(os.getpid(), signal.SIGKILL)
