#!/usr/bin/env bash
# Build the container runtime parts used by the node tier (tests/node/README.md):
#   containerd v2.4.2, containerd-shim-runc-v2, ctr, crictl v1.37.0
# with `go install <module>/cmd/<name>@<version>`, into a cache directory outside the repo:
#   ${NUMADRA_NODE_BIN:-$HOME/.cache/numadra-node/bin}
# The kubelet and the control plane come from tests/e2e/build-bins.sh.
#
# Usage: tests/node/build-bins.sh [--force] [--check]
#   --force  rebuild even when the stamp matches
#   --check  build nothing; exit 0 when the binaries are up to date, 1 otherwise
#
# Up to date means: all four binaries exist and the stamp file holds the sha256 of
# this script (which names the versions) and the Go version. Without Go the script
# prints a SKIP line and exits 0, so callers test for the binaries themselves.
# Exit 1: the build failed.
#
# Environment: NUMADRA_NODE_BIN (output dir), GO (go command),
# NUMADRA_NODE_GO_P (go install -p, default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${NUMADRA_NODE_BIN:-$HOME/.cache/numadra-node/bin}"
stampfile="$bin/.stamp"
containerd_module=github.com/containerd/containerd/v2
containerd_version=v2.4.2
crictl_module=sigs.k8s.io/cri-tools
crictl_version=v1.37.0
bins=(containerd containerd-shim-runc-v2 ctr crictl)
# Static, and without the snapshotters this tier never uses (overlayfs is the one it uses).
tags="no_btrfs no_devmapper no_zfs no_aufs"

force=0 check=0
for a in "$@"; do
	case "$a" in
	--force) force=1 ;;
	--check) check=1 ;;
	-h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "build-bins.sh: unknown argument: $a" >&2; exit 2 ;;
	esac
done

log() { printf 'node build-bins: %s\n' "$*" >&2; }

go_cmd="${GO:-}"
if [[ -z "$go_cmd" ]]; then
	if command -v go >/dev/null 2>&1; then
		go_cmd="$(command -v go)"
	elif [[ -x /usr/local/go/bin/go ]]; then
		go_cmd=/usr/local/go/bin/go
	fi
fi

have_all() {
	local b
	for b in "${bins[@]}"; do [[ -x "$bin/$b" ]] || return 1; done
}

if [[ -z "$go_cmd" ]]; then
	if have_all; then
		log "SKIP: go not found: skipping build; using existing binaries in $bin (not checked for staleness)"
	else
		log "SKIP: go not found: skipping build; no binaries in $bin"
	fi
	exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
go_version="$("$go_cmd" env GOVERSION)"

stamp() {
	{
		echo "$go_version"
		sha256sum "$here/build-bins.sh" | cut -d' ' -f1
	} | sha256sum | cut -d' ' -f1
}
want="$(stamp)"

if ((!force)) && have_all && [[ -f "$stampfile" && "$(cat "$stampfile")" == "$want" ]]; then
	log "up to date in $bin (stamp ${want:0:12})"
	exit 0
fi
if ((check)); then
	log "not up to date in $bin"
	exit 1
fi

mkdir -p "$bin"
# One build at a time per output dir (parallel test sessions).
exec 9>"$bin/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if ((!force)) && have_all && [[ -f "$stampfile" && "$(cat "$stampfile")" == "$want" ]]; then
	log "up to date in $bin (built by another process)"
	exit 0
fi

tmp="$(mktemp -d "$bin/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

t0=$(date +%s)
log "building ${bins[*]} with $go_version (-p ${NUMADRA_NODE_GO_P:-2}) into $bin"
# go install writes into GOBIN; `@version` runs outside any module, so the repo's
# go.work or go.mod play no part. The -X flags stamp the versions their Makefiles would.
(
	cd "$tmp"
	export GOBIN="$tmp" GOFLAGS=
	"$go_cmd" install -p "${NUMADRA_NODE_GO_P:-2}" -trimpath -tags "$tags" \
		-ldflags "-s -w -X $containerd_module/version.Version=$containerd_version" \
		"$containerd_module/cmd/containerd@$containerd_version" \
		"$containerd_module/cmd/containerd-shim-runc-v2@$containerd_version" \
		"$containerd_module/cmd/ctr@$containerd_version"
	"$go_cmd" install -p "${NUMADRA_NODE_GO_P:-2}" -trimpath \
		-ldflags "-s -w -X $crictl_module/pkg/version.Version=$crictl_version" \
		"$crictl_module/cmd/crictl@$crictl_version"
) || { log "FAILED after $(($(date +%s) - t0))s"; exit 1; }
t1=$(date +%s)

rm -f "$stampfile"
for b in "${bins[@]}"; do mv -f "$tmp/$b" "$bin/$b"; done
echo "$want" >"$stampfile"
for b in "${bins[@]}"; do log "  $(du -h "$bin/$b" | cut -f1)	$b"; done
log "built in $((t1 - t0))s"
