#!/usr/bin/env bash
# bench/pickle/run.sh: hostile pickles against vramguard's one pickle reader,
# side by side with Python's pickle.load (and torch.load for the archives).
#
#   bench/pickle/run.sh              # every case, once
#
# Writes into $WORK (default /tmp/vramguard-pickle-bench) the hostile pickles
# of internal/pickle/pickletest (the same shapes, written by Python here), a
# torch archive whose data.pkl is each of them (deflated), and prints wall
# seconds and peak RSS for:
#   ckpt verify   vramguard ckpt verify ARCHIVE (what ls, latest and
#                 run --resume-from ask of each file)
#   snapshot      vramguard snapshot PICKLE --json
#   pickle.load   /usr/bin/python3: pickle.load of the pickle (globals refused)
# and the load average first. Needs go, /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-/tmp/vramguard-pickle-bench}
mkdir -p "$WORK"
go build -o "$WORK/vramguard" ./cmd/vramguard
vg=$WORK/vramguard
/usr/bin/python3 - "$WORK" <<'PY'
import pickle, random, struct, sys, zipfile, os
w = sys.argv[1]
def shuffled(n):
    k = list(range(n))
    random.Random(1).shuffle(k)
    return k
def flood(first, op, n, tail=b""):
    return b"\x80\x04" + first + op * n + (b"N" if not first else b"") + b"."
cases = {
    "cycle": b"\x80\x02}q\x00(X\x08\x00\x00\x00segments]X\x0d\x00\x00\x00user_metadatah\x00\x85u.",
    "sparse_binput": b"\x80\x02N" + b"".join(b"r" + struct.pack("<I", i * 4096) for i in range(575 * 1024 // 5)) + b".",
    "dup": flood(b"N", b"2", 4 << 20),
    "empty_list": flood(b"", b"]", 2 << 20),
    "memoize": flood(b"N", b"\x94", 4_900_000),
    "none_memoize": flood(b"", b"N\x94", 4_900_000),
    "none_memoize_pop": flood(b"", b"N\x940", 4_900_000),
    "dict_keys": b"\x80\x02}(" + b"".join(b"J" + struct.pack("<I", i) + b"N" for i in range(2_400_000)) + b"u.",
    # the same keys as CPython writes a dict: SETITEMS in batches of 1000
    "dict_keys_batched": pickle.dumps({i: None for i in range(2_400_000)}, protocol=2),
    # the same keys shuffled: no key follows the one before it
    "dict_keys_shuffled": pickle.dumps({i: None for i in shuffled(2_400_000)}, protocol=2),
    # 2.4 M distinct strings in a list, and memoised and popped
    "str_list": pickle.dumps([str(i) for i in range(2_400_000)], protocol=4),
    "str_memoize_pop": b"\x80\x04" + b"".join(b"\x8c" + bytes([len(s)]) + s + b"\x940" for s in (str(i).encode() for i in range(2_400_000))) + b"N.",
}
for name, data in cases.items():
    open(os.path.join(w, name + ".pkl"), "wb").write(data)
    with zipfile.ZipFile(os.path.join(w, name + ".pt"), "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", data)
        z.writestr("archive/version", "3\n")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
measure() { # label cmd...
	local label=$1
	shift
	/usr/bin/time -f "$label: %e s wall, %M KiB peak RSS" "$@" >/dev/null 2>"$WORK/err" || true
	tail -1 "$WORK/err"
}
for f in "$WORK"/*.pkl; do
	n=$(basename "$f" .pkl)
	echo "== $n ($(stat -c %s "$f") bytes of pickle, $(stat -c %s "$WORK/$n.pt") bytes as a torch archive)"
	measure "ckpt verify (archive)" "$vg" ckpt verify "$WORK/$n.pt"
	measure "ckpt verify (plain)" "$vg" ckpt verify "$f"
	measure "snapshot" "$vg" snapshot "$f" --json
	measure "pickle.load" /usr/bin/python3 -c '
import pickle, sys
class U(pickle.Unpickler):
    def find_class(self, m, n):
        raise pickle.UnpicklingError("global")
try:
    U(open(sys.argv[1], "rb")).load()
except Exception:
    pass' "$f"
done
