#!/usr/bin/env bash
# Builds the numadra image with podman without any image registry, then smoke-tests it:
#   1. a local base image (Debian bookworm minbase + python3 + venv, from Debian's mirror with
#      debootstrap, `podman import`ed) -- cached: reused while the tag exists;
#   2. a wheelhouse on the host (numadra + dependencies + build backend), so the image build
#      itself runs with --network=none;
#   3. `podman build` of the Dockerfile with BASE_IMAGE pointing at the local base;
#   4. inside the image: `numadra version`, `numadra run --help`, an import of every module of
#      driver/ and cdi/ and of the runtime dependencies under `python -X importtime` that must not
#      load anything the Dockerfile prunes (pip, setuptools, kubernetes.aio, aiohttp and its
#      dependencies), and `numadra discover -o table` (the host's /sys and /dev mounted read-only
#      under /host, /host/proc the image's link to its own /proc, as the DaemonSet does).
#
# Env: IMAGE (default localhost/numadra:<version>), BASE_IMAGE (default
# localhost/numadra-base:bookworm), REBUILD_BASE=1 to rebuild the base, DEBIAN_MIRROR, PYTHON (for
# the wheelhouse; default .venv/bin/python). Exit codes: 0 ok, 3 prerequisites missing (no
# podman/debootstrap: nothing was tried), 4 the environment failed us (Debian mirror or package
# index unreachable while making the base or the wheelhouse), anything else a real build or
# smoke-test failure.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n1)"
IMAGE="${IMAGE:-localhost/numadra:$VERSION}"
BASE_IMAGE="${BASE_IMAGE:-localhost/numadra-base:bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PYTHON="${PYTHON:-.venv/bin/python}"
WORK="build/image"
WHEELHOUSE="build/wheelhouse"

for tool in podman runc debootstrap; do
  if ! command -v "$tool" >/dev/null; then
    echo "build-image: $tool not found (apt-get install -y --no-install-recommends podman runc conmon catatonit debootstrap)" >&2
    exit 3
  fi
done

mkdir -p "$WORK"
# podman on this kind of host: crun cannot run in cgroup hybrid mode and the hard nofile limit is
# lower than rootful podman's default, so pin runc, cgroupfs and small ulimits; no network at all.
cat >"$WORK/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
export CONTAINERS_CONF="$PWD/$WORK/containers.conf"

step() { echo "::: build-image: $*" >&2; }
t0=$SECONDS

if [[ "${REBUILD_BASE:-0}" != 1 ]] && podman image exists "$BASE_IMAGE"; then
  step "base $BASE_IMAGE cached (REBUILD_BASE=1 rebuilds it)"
else
  step "base $BASE_IMAGE from debootstrap (bookworm minbase + python3)"
  rootfs="$WORK/rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include=python3,python3-venv,libudev1 bookworm "$rootfs" "$DEBIAN_MIRROR" \
    >"$WORK/debootstrap.log" 2>&1 || { tail -n 20 "$WORK/debootstrap.log" >&2; exit 4; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*
  tar -C "$rootfs" --numeric-owner -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/usr/bin/python3"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  step "base built in $((SECONDS - t0)) s"
fi

t1=$SECONDS
step "wheelhouse $WHEELHOUSE (host pip, reused between runs)"
mkdir -p "$WHEELHOUSE"
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$WHEELHOUSE" \
  . "setuptools>=77" wheel pip || exit 4
# numadra itself is rebuilt in the image from the sources; a stale copy must not win.
rm -f "$WHEELHOUSE"/numadra-*.whl
step "wheelhouse ready in $((SECONDS - t1)) s"

t2=$SECONDS
step "podman build $IMAGE"
podman build --network=none --pull=never \
  --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg PIP_NO_INDEX=1 \
  --build-arg VERSION="$VERSION" --build-arg REVISION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  -t "$IMAGE" -f Dockerfile .
step "image built in $((SECONDS - t2)) s"

step "smoke test: numadra version / run --help / imports / discover inside $IMAGE"
podman run --rm "$IMAGE" version
podman run --rm "$IMAGE" run --help >/dev/null
# Every runtime module imports (the CLI imports lazily, so `version` alone proves little), and
# none of them reaches what the Dockerfile pruned: -X importtime names every module loaded.
podman run --rm --entrypoint /opt/numadra/bin/python "$IMAGE" -X importtime -c '
import importlib, pkgutil
import cdi, driver
for pkg in (driver, cdi):
    for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if not mod.name.endswith(".__main__"):  # that one runs the CLI
            importlib.import_module(mod.name)
import grpc, kubernetes, kubernetes.client, pyudev, yaml, structlog, prometheus_client, httptools
print("imports ok")
' 2>"$WORK/importtime.txt"
pruned='^(pip|setuptools|pkg_resources|_distutils_hack|aiohttp|aiohttp_retry|aiohappyeyeballs|aiosignal|frozenlist|multidict|propcache|yarl|attr|attrs)(\.|$)|^kubernetes\.aio(\.|$)'
if sed -n 's/^import time: *[0-9]* | *[0-9]* | *//p' "$WORK/importtime.txt" | grep -E "$pruned" >&2; then
  echo "build-image: the runtime imports a package the Dockerfile prunes (above)" >&2
  exit 1
fi
echo "imports: $(grep -c '^import time: *[0-9]' "$WORK/importtime.txt") modules, none of the pruned ones"
podman run --rm -v /sys:/host/sys:ro -v /dev:/host/dev:ro "$IMAGE" discover --host-root /host -o table
step "done in $((SECONDS - t0)) s"
