#!/usr/bin/env bash
# Build the Kubernetes parts used by the e2e tests (tests/e2e/README.md):
#   etcd, kube-apiserver, kube-scheduler, kube-controller-manager, drakubelet, kubelet
#   (the kubelet is for the node tier, tests/node; its three extra modules are in go.mod
#   through `go get k8s.io/kubernetes/cmd/kubelet@v1.37.2`: do not `go mod tidy` them away)
# from the Go module in tests/e2e/k8s, into a cache directory outside the repo:
#   ${NUMADRA_E2E_BIN:-$HOME/.cache/numadra-e2e/bin}
#
# Usage: tests/e2e/build-bins.sh [--force] [--check]
#   --force  rebuild even when the stamp matches
#   --check  build nothing; exit 0 when the binaries are up to date, 1 otherwise
#
# Up to date means: all six binaries exist and the stamp file holds the sha256
# of go.mod, go.sum, every .go file under tests/e2e/k8s, this script,
# tests/build-bins-lib.sh and the Go version. Without Go the script prints a SKIP
# line and exits 0, so callers test for the binaries themselves. Exit 1: the build failed.
#
# Environment: NUMADRA_E2E_BIN (output dir), GO (go command),
# NUMADRA_E2E_GO_P (go build -p, default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
script="$here/build-bins.sh"
mod="$here/k8s"
bin="${NUMADRA_E2E_BIN:-$HOME/.cache/numadra-e2e/bin}"
bins=(etcd kube-apiserver kube-scheduler kube-controller-manager drakubelet kubelet)
go_p="${NUMADRA_E2E_GO_P:-2}"
log_prefix=build-bins
k8s_version=v1.37.2

# The module's sources: a change to any of them rebuilds.
stamp_extra() {
	(cd "$mod" && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs sha256sum)
}

build_into() {
	local out="$1" build_date vpkg=k8s.io/component-base/version ldflags
	build_date="$(date -u ${SOURCE_DATE_EPOCH:+-d @"$SOURCE_DATE_EPOCH"} +%Y-%m-%dT%H:%M:%SZ)" &&
		ldflags="-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=37" &&
		ldflags+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=$build_date" &&
		cd "$mod" &&
		"$go_cmd" build -mod=readonly -p "$go_p" -trimpath -ldflags "$ldflags" -o "$out/" \
			./cmd/etcd ./cmd/drakubelet \
			k8s.io/kubernetes/cmd/kube-apiserver \
			k8s.io/kubernetes/cmd/kube-scheduler \
			k8s.io/kubernetes/cmd/kube-controller-manager \
			k8s.io/kubernetes/cmd/kubelet
}

# shellcheck source=../build-bins-lib.sh
source "$here/../build-bins-lib.sh"
build_bins_main "$@"
