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
# of go.mod, go.sum, every .go file under tests/e2e/k8s, this script and the Go
# version. Without Go the script prints a SKIP line and exits 0, so callers
# test for the binaries themselves. Exit 1: the build failed.
#
# Environment: NUMADRA_E2E_BIN (output dir), GO (go command),
# NUMADRA_E2E_GO_P (go build -p, default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="$here/k8s"
bin="${NUMADRA_E2E_BIN:-$HOME/.cache/numadra-e2e/bin}"
stampfile="$bin/.stamp"
bins=(etcd kube-apiserver kube-scheduler kube-controller-manager drakubelet kubelet)
k8s_version=v1.37.2

force=0 check=0
for a in "$@"; do
	case "$a" in
	--force) force=1 ;;
	--check) check=1 ;;
	-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "build-bins.sh: unknown argument: $a" >&2; exit 2 ;;
	esac
done

log() { printf 'build-bins: %s\n' "$*" >&2; }

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
	(
		cd "$mod"
		{
			echo "$go_version"
			sha256sum "$here/build-bins.sh" | cut -d' ' -f1
			find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs sha256sum
		} | sha256sum | cut -d' ' -f1
	)
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

build_date="$(date -u ${SOURCE_DATE_EPOCH:+-d @"$SOURCE_DATE_EPOCH"} +%Y-%m-%dT%H:%M:%SZ)"
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=37"
ldflags+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=$build_date"

tmp="$(mktemp -d "$bin/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

t0=$(date +%s)
log "building ${bins[*]} with $go_version (-p ${NUMADRA_E2E_GO_P:-2}) into $bin"
(
	cd "$mod"
	"$go_cmd" build -mod=readonly -p "${NUMADRA_E2E_GO_P:-2}" -trimpath -ldflags "$ldflags" -o "$tmp/" \
		./cmd/etcd ./cmd/drakubelet \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kubelet
) || { log "FAILED after $(($(date +%s) - t0))s"; exit 1; }
t1=$(date +%s)

rm -f "$stampfile"
for b in "${bins[@]}"; do mv -f "$tmp/$b" "$bin/$b"; done
echo "$want" >"$stampfile"
for b in "${bins[@]}"; do log "  $(du -h "$bin/$b" | cut -f1)	$b"; done
log "built in $((t1 - t0))s"
