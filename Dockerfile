# numadra: the DaemonSet image of the NUMA-aligned DRA driver.
#
# Two stages on the same base: "builder" turns the source into wheels (numadra and every
# dependency), the final stage installs only those wheels into a virtual environment, with no
# compiler, no pip cache and no source tree left behind.
#
#   podman build -t numadra:dev .                          # base from a registry
#   scripts/build-image.sh                                 # no registry: local Debian base, offline
#
# BASE_IMAGE must provide python3 (3.11+) with the venv module. Wheels found in
# build/wheelhouse/ of the build context are used first, so an offline build (PIP_NO_INDEX=1 and
# a wheelhouse filled by scripts/build-image.sh) needs no package index either.
#
# Privileges are set by the DaemonSet, not here: the image runs as an unprivileged user (10001),
# which is all `numadra discover|explain|state|version` need. `numadra run` needs more, per
# pinning backend (docs/deploy.md):
#   every backend  root (no capabilities): sockets in the kubelet's root-owned hostPath dirs
#                  /var/lib/kubelet/plugins_registry and /var/lib/kubelet/plugins/<driver>,
#                  CDI specs in /var/run/cdi
#   nri            + the NRI socket /var/run/nri/nri.sock (hostPath; owned by root)
#   hook           + write access to the host dir the runtime runs the hook from; the hook itself
#                  writes the cgroup fs, run by the runtime as root on the host
#   cgroupfs       nothing more (the daemon writes no cgroup; docs/security.md)
# Discovery reads --host-root=/host: the DaemonSet mounts the host's /sys and /dev there read-only,
# and /host/proc is a link to the container's own /proc, which shows the host kernel's meminfo and
# /proc/driver/nvidia without mounting the host's /proc (every process's environment).
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ARG PIP_NO_INDEX=0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_FIND_LINKS=/src/build/wheelhouse
COPY . /src
RUN mkdir -p /src/build/wheelhouse \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip wheel --quiet --wheel-dir /wheels /src

FROM ${BASE_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="numadra" \
      org.opencontainers.image.description="NUMA-aligned DRA kubelet plugin: GPUs, NICs, CPUs and memory in one ResourceClaim" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="numadra"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY --from=builder /wheels /tmp/wheels
RUN python3 -m venv /opt/numadra \
 && /opt/numadra/bin/pip install --quiet --no-index --find-links /tmp/wheels numadra \
 && rm -rf /tmp/wheels \
 && (getent passwd numadra >/dev/null || useradd --uid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin numadra) \
 && mkdir -p /host && ln -s /proc /host/proc
ENV PATH=/opt/numadra/bin:${PATH} PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
ENTRYPOINT ["numadra"]
CMD ["run"]
