#!/usr/bin/env bash
# The test command. It installs the Debian packages the tests need
# (scripts/test-packages.txt) when it can (root with apt-get), or stops at
# once with the one command to run; then it runs every test. Arguments go to
# `go test` (default ./...), e.g. scripts/test.sh ./internal/ckpt/... -run Scan;
# --setup installs and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t pkgs < <(sed 's/#.*//' scripts/test-packages.txt | awk 'NF {print $1}')
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/test.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "scripts/test.sh: the tests need Debian packages that are missing; install them with: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 3
  fi
fi

if [ "${1:-}" = --setup ]; then exit 0; fi
pkgs_or_flags=("$@")
[ ${#pkgs_or_flags[@]} -gt 0 ] || pkgs_or_flags=(./...)
# ./... with the longest packages first: go test starts packages in the
# order given, and one of them started last (internal/probe, 2 minutes)
# ended the run alone.
first=(./e2e ./internal/probe ./e2e/install ./internal/jupyter ./internal/ckpt ./internal/agent ./internal/cli)
for i in "${!pkgs_or_flags[@]}"; do
  if [ "${pkgs_or_flags[$i]}" = ./... ]; then
    mapfile -t rest < <(go list -f '{{.Dir}}' ./... | sed "s|^$PWD|.|")
    ordered=()
    for p in "${first[@]}"; do [[ " ${rest[*]} " == *" $p "* ]] && ordered+=("$p"); done
    for p in "${rest[@]}"; do [[ " ${first[*]} " == *" $p "* ]] || ordered+=("$p"); done
    pkgs_or_flags=("${pkgs_or_flags[@]:0:$i}" "${ordered[@]}" "${pkgs_or_flags[@]:$((i + 1))}")
    break
  fi
done
# Test binaries at once: go's default is one per core, but the slowest
# packages (e2e, e2e/install, internal/probe) spend much of their time
# waiting on jobs they supervise, so on a small machine more run alongside.
jobs=$(nproc)
[ "$jobs" -ge 4 ] || jobs=4
# -trimpath (for the go builds the tests run too, through GOFLAGS): the
# build cache's entries no longer depend on where the checkout is, so a
# second clone or worktree reuses what the first compiled (without it every
# package compiles again, some 40 s of CPU here). -ldflags=-w: the test
# binaries are linked without DWARF, a fifth less link time for some 45 of
# them (a failing test's stack trace does not need it; a debugger builds
# its own binary).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"
exec go test -timeout 30m -p "$jobs" -ldflags=-w "${pkgs_or_flags[@]}"
