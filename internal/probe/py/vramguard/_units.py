"""Sizes as the notebook side prints and parses them (binary units)."""

_STEPS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
_PARSE = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}


def size(n):
    """1.2 GiB, 210 MiB, 12 KiB, 0 B: one decimal from GiB up, whole numbers below."""
    n = int(n)
    a = abs(n)
    for unit, f in _STEPS:
        if a >= f:
            if f >= 1 << 30:
                return "%.1f %s" % (n / f, unit)
            return "%d %s" % (round(n / f), unit)
    return "%d B" % n


def signed(n):
    """+1.2 GiB, -210 MiB, +0 B."""
    return ("-" if n < 0 else "+") + size(abs(n))


def parse_size(s):
    """64MiB, 64M, 1.5 GiB, 1048576 -> bytes; ValueError with the reason."""
    t = s.strip().replace(" ", "")
    i = len(t)
    while i > 0 and t[i - 1].isalpha():
        i -= 1
    num, unit = t[:i], t[i:].lower()
    if unit not in _PARSE or not num:
        raise ValueError("%r is not a size (examples: 64MiB, 1.5GiB, 1048576)" % s)
    try:
        v = float(num)
    except ValueError:
        raise ValueError("%r is not a size (examples: 64MiB, 1.5GiB, 1048576)" % s) from None
    if not v >= 0 or v == float("inf"):
        raise ValueError("%r is not a size: it must be zero or more" % s)
    return int(v * _PARSE[unit])


def parse_duration(s):
    """10m, 90s, 1h, 1h30m, 30 -> seconds (a bare number is seconds)."""
    t = s.strip().lower()
    if not t:
        raise ValueError("empty duration (examples: 10m, 90s, 1h)")
    total, num = 0.0, ""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    for ch in t:
        if ch.isdigit() or ch == ".":
            num += ch
        elif ch in units and num:
            total += float(num) * units[ch]
            num = ""
        else:
            raise ValueError("%r is not a duration (examples: 10m, 90s, 1h)" % s)
    if num:
        total += float(num)
    if not total > 0:
        raise ValueError("%r is not a duration: it must be more than zero" % s)
    return total
