"""This process's resident memory, as the kernel counts it in
/proc/self/statm.

    PAGE         the page size statm counts in
    rss()        resident bytes, read afresh (open, read, close)
    Statm()      a kept /proc/self/statm: .rss() is one pread on it,
                 .close() lets it go (a forked child closes its parent's)

Both rss() and Statm.rss() raise OSError, ValueError or IndexError where
statm cannot be read; each caller chooses what it reports then.
"""

import os

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss():
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


class Statm:
    # Every syscall releases the GIL, and taking it back from a busy
    # training thread costs that thread a switch: one pread on a kept fd
    # instead of open/read/close.

    def __init__(self):
        self.fd = None

    def rss(self):
        if self.fd is None:
            self.fd = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return int(os.pread(self.fd, 256, 0).split()[1]) * PAGE

    def close(self):
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
