"""The probe running in this process, which every part of the probe reads.

`p` is the running probe (vramguard._probe._Probe), or None before start(),
after stop() and in a forked child until its own probe has begun. Only
vramguard._probe sets it; the other parts read it each time they act (a
save, an OOM, the end of torch's import), never keep it.
"""

p = None
