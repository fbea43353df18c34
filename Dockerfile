# numadra: the DaemonSet image of the NUMA-aligned DRA driver.
#
# Three stages on the same base, the last one flattened:
#   builder  turns the source into wheels (numadra and every dependency) and installs them into
#            the runtime virtual environment /opt/numadra, made --without-pip and installed by the
#            builder's own pip, then prunes what the runtime never imports (see the list there);
#   rootfs   the base plus that venv, the user and the /host links, minus the base's
#            documentation (docs, man pages, translations, the bundled pip/setuptools wheels);
#   final    `FROM scratch` + one COPY of rootfs: files deleted in rootfs are really gone (a
#            deletion in a later layer of a layered image saves nothing). The price: the final
#            image shares no layer with its base, so a node pulls all of it (about 250 MB, once
#            per version).
# No compiler, pip, setuptools, pip cache or source tree is left in the final image.
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
# /proc/driver/nvidia without mounting the host's /proc (every process's environment). The host's
# /usr is mounted at /host/usr for the NVIDIA driver's files; /host/lib, lib64, bin and sbin link
# into it as on a merged-/usr host, so a path such as /lib/x86_64-linux-gnu/libcuda.so.1 in a
# toolkit CDI spec resolves as it does on the host.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ARG PIP_NO_INDEX=0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_FIND_LINKS=/src/build/wheelhouse
COPY . /src
# What the runtime never imports, pruned after the install (checked by scripts/build-image.sh: it
# imports every module of driver/ and cdi/ plus the runtime dependencies under -X importtime and
# fails if any of these shows up, then runs `numadra run --help`):
#   pip, setuptools  never in the venv (--without-pip; the builder's pip installs into it)
#   kubernetes/aio   the asyncio twin of the official client (~65 MiB with bytecode); numadra
#                    uses the synchronous client only, and `import kubernetes` does not load it
#   aiohttp and its dependencies (aiohttp-retry aiohappyeyeballs aiosignal frozenlist multidict
#                    propcache yarl attrs)  required by the kubernetes distribution for aio only
# (pydantic stays: the synchronous kubernetes client imports it.)
RUN mkdir -p /src/build/wheelhouse \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip wheel --quiet --wheel-dir /wheels /src \
 && python3 -m venv --without-pip /opt/numadra \
 && /opt/build/bin/pip --python /opt/numadra/bin/python install --quiet --no-index --find-links /wheels numadra \
 && /opt/build/bin/pip --python /opt/numadra/bin/python uninstall --quiet --yes \
        aiohttp aiohttp-retry aiohappyeyeballs aiosignal frozenlist multidict propcache yarl attrs \
 && rm -rf /opt/numadra/lib/python3*/site-packages/kubernetes/aio

FROM ${BASE_IMAGE} AS rootfs
COPY --from=builder /opt/numadra /opt/numadra
# Documentation and translations of the base (numadra speaks English and reads no man page) and
# the pip/setuptools wheels that only `python3 -m venv` with pip would use.
RUN rm -rf /usr/share/doc /usr/share/man /usr/share/info /usr/share/locale /usr/share/python-wheels \
 && (getent passwd numadra >/dev/null || useradd --uid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin numadra) \
 && mkdir -p /host && ln -s /proc /host/proc \
 && for d in lib lib64 bin sbin; do ln -s "usr/$d" "/host/$d"; done

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="numadra" \
      org.opencontainers.image.description="NUMA-aligned DRA kubelet plugin: GPUs, NICs, CPUs and memory in one ResourceClaim" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="numadra"
COPY --from=rootfs / /
# A scratch image inherits no ENV: PATH names the base's interpreter dirs (/usr/local/bin for the
# python:*-slim bases, /usr/bin for Debian's) after the venv.
ENV PATH=/opt/numadra/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
ENTRYPOINT ["numadra"]
CMD ["run"]
