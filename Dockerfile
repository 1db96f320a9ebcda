# syntax=docker/dockerfile:1
# The vramguard agent image, for the DaemonSet in deploy/kubernetes.
#
# It holds the binary scripts/dist.sh built and tested; nothing is compiled
# here. Run scripts/dist.sh first (it also rehearses this file: see
# docs/INSTALL.md, "Container image"), then:
#
#   . dist/versions.env
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION="$VERSION" -t ghcr.io/vramguard/vramguard:"$IMAGE_TAG" --push .
#
# The base is distroless's glibc image: glibc, CA certificates, tzdata and an
# unprivileged "nonroot" user (65532); no shell, no package manager. NVML is
# not in it: the NVIDIA container runtime mounts the driver's
# libnvidia-ml.so.1, which vramguard opens when it starts. Pin BASE by digest
# in a release pipeline (BASE=gcr.io/distroless/base-nossl-debian12@sha256:...).
ARG BASE=gcr.io/distroless/base-nossl-debian12:nonroot
FROM ${BASE}
ARG TARGETARCH
ARG VERSION=unknown
LABEL org.opencontainers.image.title="vramguard" \
      org.opencontainers.image.description="vramguard agent: GPU memory per job, dashboard, Prometheus metrics, alerts" \
      org.opencontainers.image.source="https://github.com/vramguard/vramguard" \
      org.opencontainers.image.version="${VERSION}"
COPY dist/linux-${TARGETARCH}/vramguard /usr/bin/vramguard
# Not root. Watching GPU memory needs no privilege (hostPID and the NVIDIA
# runtime, see deploy/kubernetes); signalling other users' jobs through the
# API would need CAP_KILL as root (docs/INSTALL.md).
USER 65532:65532
EXPOSE 9345
ENTRYPOINT ["/usr/bin/vramguard"]
# Beyond loopback serve needs a token: mount one at /etc/vramguard/token
# (the DaemonSet mounts a Secret there) or serve refuses to start.
CMD ["serve", "--listen", "0.0.0.0:9345", "--token-file", "/etc/vramguard/token", "--home", "/var/lib/vramguard"]
