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
# this script (which names the versions), tests/build-bins-lib.sh and the Go version.
# Without Go the script prints a SKIP line and exits 0, so callers test for the
# binaries themselves. Exit 1: the build failed.
#
# Environment: NUMADRA_NODE_BIN (output dir), GO (go command),
# NUMADRA_NODE_GO_P (go install -p, default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
script="$here/build-bins.sh"
bin="${NUMADRA_NODE_BIN:-$HOME/.cache/numadra-node/bin}"
bins=(containerd containerd-shim-runc-v2 ctr crictl)
go_p="${NUMADRA_NODE_GO_P:-2}"
log_prefix="node build-bins"
containerd_module=github.com/containerd/containerd/v2
containerd_version=v2.4.2
crictl_module=sigs.k8s.io/cri-tools
crictl_version=v1.37.0
# Static, and without the snapshotters this tier never uses (overlayfs is the one it uses).
tags="no_btrfs no_devmapper no_zfs no_aufs"

# The versions are in this script, which the stamp already covers.
stamp_extra() { :; }

# go install writes into GOBIN; `@version` runs outside any module, so the repo's
# go.work or go.mod play no part. The -X flags stamp the versions their Makefiles would.
build_into() {
	local out="$1"
	cd "$out" &&
		export GOBIN="$out" GOFLAGS= &&
		"$go_cmd" install -p "$go_p" -trimpath -tags "$tags" \
			-ldflags "-s -w -X $containerd_module/version.Version=$containerd_version" \
			"$containerd_module/cmd/containerd@$containerd_version" \
			"$containerd_module/cmd/containerd-shim-runc-v2@$containerd_version" \
			"$containerd_module/cmd/ctr@$containerd_version" &&
		"$go_cmd" install -p "$go_p" -trimpath \
			-ldflags "-s -w -X $crictl_module/pkg/version.Version=$crictl_version" \
			"$crictl_module/cmd/crictl@$crictl_version"
}

# shellcheck source=../build-bins-lib.sh
source "$here/../build-bins-lib.sh"
build_bins_main "$@"
