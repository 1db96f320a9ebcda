#!/usr/bin/env bash
# scripts/dist.sh: build vramguard's release artifacts from this checkout
# into dist/ (docs/INSTALL.md says what each is and how to publish it):
#
#   dist/linux-{amd64,arm64}/vramguard                    the binaries (cgo, for NVML)
#   dist/vramguard-V-py3-none-manylinux_X_Y_{x86_64,aarch64}.whl   pip install vramguard
#   dist/vramguard_V_{amd64,arm64}.deb                    dpkg -i / apt install ./...
#   dist/SHA256SUMS, dist/versions.env                    checksums; VERSION, DEB_VERSION, IMAGE_TAG, REVISION
#
# and rehearses the Dockerfile's image with the amd64 binary (see "image"
# below). Environment:
#
#   VERSION=1.2.3        the release version (default: packaging/VERSION on the
#                        commit tagged v<it>, else <it>.devN+g<commit>)
#   DIST_ARCHES="amd64"  the architectures (default "amd64 arm64"; arm64 needs
#                        Debian's gcc-aarch64-linux-gnu)
#   DIST_DIR=DIR         where the artifacts go (default dist/)
#   DIST_IMAGE_RUN=0     rehearse the image without starting it (starting it
#                        needs root)
#   SOURCE_DATE_EPOCH    timestamps inside the packages (default: the commit's)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DIST=${DIST_DIR:-$root/dist}
ARCHES=${DIST_ARCHES:-amd64 arm64}
module=github.com/vramguard/vramguard

say() { printf 'dist: %s\n' "$*"; }
die() { printf 'dist: %s\n' "$*" >&2; exit 1; }

for tool in go git dpkg-deb file gzip sha256sum; do
  command -v "$tool" >/dev/null || die "$tool is not installed (Debian: .ci/run lists the packages)"
done
git rev-parse --git-dir >/dev/null 2>&1 || die "not a git checkout: the binaries are stamped with the commit they are built from"

# --- version -----------------------------------------------------------------
base=$(tr -d ' \n' < packaging/VERSION)
[[ $base =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "packaging/VERSION holds '$base', not X.Y.Z"
revision=$(git rev-parse HEAD)
dirty=
[ -z "$(git status --porcelain --untracked-files=no)" ] || dirty=1
if [ -n "${VERSION:-}" ]; then
  version=$VERSION
elif [ -z "$dirty" ] && git describe --exact-match --tags --match "v$base" HEAD >/dev/null 2>&1; then
  version=$base
else
  since=$(git log -1 --format=%H -- packaging/VERSION)
  n=$(git rev-list --count ${since:+"$since"..}HEAD)
  version="$base.dev$n+g${revision:0:12}${dirty:+.dirty}"
fi
[[ $version =~ ^[0-9]+(\.[0-9]+)*(\.dev[0-9]+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?$ ]] ||
  die "version '$version' is not a PEP 440 version dist.sh can also spell for Debian and a container tag"
deb_version=${version/.dev/\~dev}  # ~ sorts before the release, as .devN does for pip
image_tag=${version//+/-}          # a container tag has no +
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
say "vramguard $version (commit $revision${dirty:+, with uncommitted changes})"

# The manifest names the image by the release version, never latest.
manifest=deploy/kubernetes/vramguard.yaml
grep -Eq "^\s*image: ghcr.io/vramguard/vramguard:$base\s*$" "$manifest" ||
  die "$manifest must name ghcr.io/vramguard/vramguard:$base (packaging/VERSION), found: $(grep -E '^\s*image:' "$manifest" | xargs)"

# --- output directory ----------------------------------------------------------
if [ -e "$DIST" ] && [ -n "$(ls -A "$DIST")" ] && [ ! -e "$DIST/.vramguard-dist" ]; then
  die "$DIST is not empty and was not made by dist.sh; refusing to clear it"
fi
rm -rf "$DIST"
mkdir -p "$DIST/build"
touch "$DIST/.vramguard-dist"
build=$DIST/build

# --- binaries --------------------------------------------------------------------
declare -A cc=([amd64]=x86_64-linux-gnu-gcc [arm64]=aarch64-linux-gnu-gcc)
declare -A filearch=([amd64]=x86-64 [arm64]="ARM aarch64")
[ "$(go env GOHOSTARCH)" = amd64 ] || die "dist.sh cross-compiles from amd64 (this machine is $(go env GOHOSTARCH))"
command -v x86_64-linux-gnu-gcc >/dev/null || cc[amd64]=gcc
for arch in $ARCHES; do
  [ -n "${cc[$arch]:-}" ] || die "DIST_ARCHES: unknown architecture $arch (amd64, arm64)"
  command -v "${cc[$arch]}" >/dev/null ||
    die "${cc[$arch]} is missing: apt-get install gcc-aarch64-linux-gnu, or DIST_ARCHES=amd64"
done
# go-nvml declares NVML calls the driver marks deprecated; the warnings are not ours.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
for arch in $ARCHES; do
  out=$DIST/linux-$arch/vramguard
  say "building linux/$arch"
  CGO_ENABLED=1 GOOS=linux GOARCH=$arch CC=${cc[$arch]} \
    go build -trimpath -buildvcs=true -ldflags "-s -w -X $module/internal/cli.Version=$version" -o "$out" ./cmd/vramguard
  desc=$(file -b "$out")
  [[ $desc == "ELF 64-bit LSB "*", ${filearch[$arch]},"* ]] || die "$out is not a 64-bit ${filearch[$arch]} ELF: $desc"
  say "  $(basename "$out") ($arch): $desc"
done

go build -trimpath -o "$build/disttool" ./packaging/disttool
for arch in $ARCHES; do
  "$build/disttool" elf -binary "$DIST/linux-$arch/vramguard" -arch "$arch" > "$build/elf-$arch.json"
done


# The amd64 binary is tried here: its version, its commit, a supervised job.
if [[ " $ARCHES " == *" amd64 "* ]]; then
  bin=$DIST/linux-amd64/vramguard
  got=$("$bin" version --json)
  grep -qF "\"version\": \"$version\"" <<<"$got" || die "the amd64 binary reports another version: $got"
  grep -qF "\"revision\": \"$revision\"" <<<"$got" || die "the amd64 binary reports another revision: $got"
  VRAMGUARD_HOME=$build/smoke-home "$bin" run --name dist-smoke -- sh -c 'echo vramguard-dist-smoke' > "$build/smoke.out" 2>&1 ||
    die "a supervised job failed under the amd64 binary: $(cat "$build/smoke.out")"
  grep -q vramguard-dist-smoke "$build/smoke.out" || die "the supervised job's output did not pass through: $(cat "$build/smoke.out")"
  say "  the amd64 binary reports $version at $revision and supervises a job"
fi

# --- man pages, completions ----------------------------------------------------
"$build/disttool" docs -version "$version" -out "$build/docs"

# --- wheels ---------------------------------------------------------------------------
for arch in $ARCHES; do
  whl=$("$build/disttool" wheel -binary "$DIST/linux-$arch/vramguard" -arch "$arch" -version "$version" -readme README.md -out "$DIST")
  say "  $(basename "$whl")"
done

# --- Debian packages ------------------------------------------------------------------
maintainer=${DEB_MAINTAINER:-$(git log -1 --format='%an <%ae>' -- packaging/VERSION)}
[ -n "$maintainer" ] || maintainer=$(git log -1 --format='%an <%ae>')
for arch in $ARCHES; do
  stage=$build/deb-$arch
  glibc=$(sed -n 's/.*"glibc": "\(.*\)".*/\1/p' "$build/elf-$arch.json")
  install -D -m 0755 "$DIST/linux-$arch/vramguard" "$stage/usr/bin/vramguard"
  install -d "$stage/lib/systemd/system"
  sed 's#/usr/local/bin/vramguard#/usr/bin/vramguard#g' deploy/systemd/vramguard.service > "$stage/lib/systemd/system/vramguard.service"
  grep -q '^ExecStart=/usr/bin/vramguard ' "$stage/lib/systemd/system/vramguard.service" ||
    die "deploy/systemd/vramguard.service: ExecStart does not start /usr/local/bin/vramguard, which the package moves to /usr/bin"
  chmod 0644 "$stage/lib/systemd/system/vramguard.service"
  install -D -m 0644 "$build/docs/completions/vramguard.bash" "$stage/usr/share/bash-completion/completions/vramguard"
  install -D -m 0644 "$build/docs/completions/_vramguard" "$stage/usr/share/zsh/vendor-completions/_vramguard"
  install -D -m 0644 "$build/docs/completions/vramguard.fish" "$stage/usr/share/fish/vendor_completions.d/vramguard.fish"
  install -d "$stage/usr/share/man/man1"
  for page in "$build"/docs/man1/*.1; do
    gzip -9n < "$page" > "$stage/usr/share/man/man1/$(basename "$page").gz"
  done
  doc=$stage/usr/share/doc/vramguard
  install -D -m 0644 README.md "$doc/README.md"
  install -m 0644 docs/*.md "$doc/"
  install -D -m 0644 deploy/prometheus/rules.yml "$doc/examples/prometheus-rules.yml"
  install -D -m 0644 deploy/grafana/vramguard.json "$doc/examples/grafana-dashboard.json"
  install -D -m 0644 deploy/kubernetes/vramguard.yaml "$doc/examples/kubernetes.yaml"
  install -d "$stage/DEBIAN"
  cat > "$stage/DEBIAN/control" <<EOF
Package: vramguard
Version: $deb_version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: libc6 (>= $glibc)
Recommends: python3
Section: utils
Priority: optional
Homepage: https://github.com/vramguard/vramguard
Description: supervise PyTorch training jobs and watch GPU memory
 vramguard runs training jobs under supervision (logs, memory of the whole
 process tree, PyTorch's allocator through an in-process probe, a
 post-mortem that names why a job died, restarts from the newest valid
 checkpoint), shows every GPU process by job, container, pod or notebook,
 reads checkpoints without Python, and runs a machine-wide agent with a
 dashboard, Prometheus metrics and alerts (vramguard.service, not enabled).
EOF
  # The unit is not enabled or started: the agent is opt-in
  # (systemctl enable --now vramguard).
  cat > "$stage/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
EOF
  cat > "$stage/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
  systemctl disable --now vramguard.service >/dev/null 2>&1 || true
fi
EOF
  cat > "$stage/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
# The agent's state (StateDirectory=vramguard) goes on purge only.
if [ "$1" = purge ]; then
  rm -rf /var/lib/vramguard
fi
EOF
  chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"
  (cd "$stage" && find usr lib -type f -print0 | sort -z | xargs -0 md5sum > DEBIAN/md5sums)
  find "$stage" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  deb=$DIST/vramguard_${deb_version}_$arch.deb
  # xz -1: the package is 11% larger than at -6 (7.6 against 6.8 MB for
  # amd64) and takes a fifth of the CPU (4 s against 21 s), here and in
  # every test run that builds it; every dpkg reads it.
  dpkg-deb --root-owner-group -Zxz -z1 --build "$stage" "$deb" >/dev/null
  say "  $(basename "$deb")"
done

# --- image ---------------------------------------------------------------------------------
# No container engine runs here; disttool lays out the image the Dockerfile
# describes over a stand-in for its glibc base, checks its binary starts
# there, and (amd64, as root) starts its command read-only as its user.
# The build context is what `docker build .` would see after .dockerignore.
ctx=$build/context
mkdir -p "$ctx/dist"
cp .dockerignore "$ctx/"
for arch in $ARCHES; do
  mkdir -p "$ctx/dist/linux-$arch"
  ln "$DIST/linux-$arch/vramguard" "$ctx/dist/linux-$arch/vramguard"
  run=
  if [ "$arch" = "$(go env GOHOSTARCH)" ] && [ "${DIST_IMAGE_RUN:-1}" != 0 ]; then run=-run; fi
  "$build/disttool" image -dockerfile Dockerfile -context "$ctx" -arch "$arch" -version "$version" \
    -manifest "$manifest" -work "$build/image" $run | sed 's/^/dist:   /'
done

# --- checksums -----------------------------------------------------------------------------
cat > "$DIST/versions.env" <<EOF
VERSION=$version
DEB_VERSION=$deb_version
IMAGE_TAG=$image_tag
REVISION=$revision
EOF
rm -rf "$build"
(cd "$DIST" && sha256sum -- linux-*/vramguard *.whl *.deb > SHA256SUMS)
say "done: $DIST"
(cd "$DIST" && ls -l -- *.whl *.deb linux-*/vramguard | awk '{print "dist:   " $5 "  " $NF}')
