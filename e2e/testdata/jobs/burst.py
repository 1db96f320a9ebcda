# Writes N MB in bursts of numbered lines as fast as it can, then SIGKILLs
# itself without flushing anything else.
import os, signal, sys
total = int(sys.argv[1]) << 20
line = 0
written = 0
fd = sys.stdout.fileno()

def write_all(b):
    # os.write may write less than asked when the pipe is full and a signal
    # arrives; keep going so the job itself loses nothing.
    view = memoryview(b)
    while view:
        n = os.write(fd, view)
        view = view[n:]

while written < total:
    chunk = b"".join(b"line %09d %s\n" % (line + i, b"x" * 80) for i in range(1000))
    line += 1000
    write_all(chunk)
    written += len(chunk)
sys.stderr.write("wrote %d lines\n" % line)
sys.stderr.flush()
os.kill(os.getpid(), signal.SIGKILL)
