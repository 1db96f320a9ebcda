# bench/lib.sh: what the benchmark scripts share; sourced (POSIX sh) from the
# repository root.

# bench_build [CLEANUP]: a fresh scratch directory in $tmp, removed when the
# script exits (after the shell commands CLEANUP, when given: stopping what
# still runs there), with vramguard built from this checkout as
# $tmp/vramguard.
bench_build() {
	tmp=$(mktemp -d)
	trap "${1:+$1; }"'rm -rf "$tmp"' EXIT
	go build -o "$tmp/vramguard" ./cmd/vramguard
}
