#!/usr/bin/env bash
# Builds the tools the deploy/ check needs from their Go modules (no release binaries can be
# downloaded here): the two renderers, kustomize and helm, and promtool, which checks that the
# alerting rules of deploy/monitoring load. Into a cache that survives between runs:
#   $NUMADRA_TOOLS_DIR (default ~/.cache/numadra-tools)/bin/{kustomize,helm,promtool}
# Versions: the newest whose go.mod the local Go (1.26) accepts (kustomize v5.8.3 wants Go 1.27)
# and `go install` can build (Prometheus tags its Go module v0.3MM.P for v3.MM.P; v0.315.x still
# had replace directives, which `go install module@version` refuses).
# A tool is rebuilt only when its pinned version changed (a stamp file records what was built).
# Prints the bin directory on stdout; progress and timings go to stderr.
set -euo pipefail

KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.8.2}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
PROMTOOL_VERSION="${PROMTOOL_VERSION:-v0.316.0}"
TOOLS_DIR="${NUMADRA_TOOLS_DIR:-$HOME/.cache/numadra-tools}"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"

if [[ ! -x "$GO" ]]; then
  echo "build-deploy-tools: no Go toolchain (set GO=/path/to/go)" >&2
  exit 3
fi

mkdir -p "$TOOLS_DIR/bin"
# CGO off: static binaries, and no C compiler needed. -trimpath keeps the build reproducible.
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath"

build() {  # build NAME MODULE_PATH@VERSION [go install flags...]
  local name="$1" spec="$2" stamp="$TOOLS_DIR/bin/.$1.version"
  shift 2
  local want="$spec${*:+ $*}"  # the flags are part of what was built
  if [[ -x "$TOOLS_DIR/bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "build-deploy-tools: $name up to date ($want)" >&2
    return 0
  fi
  local start=$SECONDS
  echo "build-deploy-tools: building $want" >&2
  GOBIN="$TOOLS_DIR/bin" nice -n 10 "$GO" install "$@" "$spec"
  echo "$want" >"$stamp"
  echo "build-deploy-tools: $name built in $((SECONDS - start)) s" >&2
}

build kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
build helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
# remove_all_sd: without Prometheus' service-discovery plugins (AWS, Azure, GCE, Kubernetes, ...),
# which `promtool check rules` never uses and which are most of its compile time
build promtool "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION" -tags=remove_all_sd
echo "$TOOLS_DIR/bin"
