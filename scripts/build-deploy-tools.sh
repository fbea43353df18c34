#!/usr/bin/env bash
# Builds the two renderers the deploy/ check needs, kustomize and helm, from their Go modules
# (no release binaries can be downloaded here), into a cache that survives between runs:
#   $NUMADRA_TOOLS_DIR (default ~/.cache/numadra-tools)/bin/{kustomize,helm}
# Versions: the newest whose go.mod the local Go (1.26) accepts (kustomize v5.8.3 wants Go 1.27).
# A tool is rebuilt only when its pinned version changed (a stamp file records what was built).
# Prints the bin directory on stdout; progress and timings go to stderr.
set -euo pipefail

KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.8.2}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
TOOLS_DIR="${NUMADRA_TOOLS_DIR:-$HOME/.cache/numadra-tools}"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"

if [[ ! -x "$GO" ]]; then
  echo "build-deploy-tools: no Go toolchain (set GO=/path/to/go)" >&2
  exit 3
fi

mkdir -p "$TOOLS_DIR/bin"
# CGO off: static binaries, and no C compiler needed. -trimpath keeps the build reproducible.
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath"

build() {  # build NAME MODULE_PATH@VERSION
  local name="$1" spec="$2" stamp="$TOOLS_DIR/bin/.$1.version"
  if [[ -x "$TOOLS_DIR/bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$spec" ]]; then
    echo "build-deploy-tools: $name up to date ($spec)" >&2
    return 0
  fi
  local start=$SECONDS
  echo "build-deploy-tools: building $spec" >&2
  GOBIN="$TOOLS_DIR/bin" nice -n 10 "$GO" install "$spec"
  echo "$spec" >"$stamp"
  echo "build-deploy-tools: $name built in $((SECONDS - start)) s" >&2
}

build kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
build helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
echo "$TOOLS_DIR/bin"
