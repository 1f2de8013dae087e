#!/usr/bin/env bash
# Build helm from the Go module proxy, or find it in the cache, and print the binary's path.
#
# helm renders and lints config/helm/topogate in the tests. It is built like the control plane
# (hack/controlplane/build.sh): a wrapper module requiring helm.sh/helm/v3 at one version, so a
# proxy serving only pinned versions works (`go install …@version` also asks for the version list).
#
#   ${TOPOGATE_CACHE:-~/.cache/topogate}/helm-<version>/helm
# A warm machine returns at once; a cold one needs the Go module proxy and a few minutes.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE=${TOPOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topogate}
OUT=$CACHE/helm-$HELM_VERSION
if [ -x "$OUT/helm" ]; then
  echo "$OUT/helm"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
command -v go >/dev/null || { echo "build-helm.sh: go is not installed" >&2; exit 1; }
log() { echo "build-helm.sh: $*" >&2; }
started=$(date +%s)
src=$CACHE/src/helm-$HELM_VERSION
mkdir -p "$src" "$OUT"
cd "$src"
if [ ! -f go.sum ]; then
  rm -f go.mod
  go mod init topogate.local/helmbin >/dev/null 2>&1
  go mod edit -require "helm.sh/helm/v3@$HELM_VERSION" -tool helm.sh/helm/v3/cmd/helm
  log "resolving helm $HELM_VERSION modules"
  go mod tidy
fi
log "compiling helm $HELM_VERSION"
# The version variable makes `helm version` tell the truth (it says v3 "main" otherwise).
tmp=$(mktemp "$OUT/.helm.XXXXXX")
trap 'rm -f "$tmp"' EXIT
go build -p 2 -trimpath -o "$tmp" \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" helm.sh/helm/v3/cmd/helm
chmod 755 "$tmp"
mv "$tmp" "$OUT/helm"
trap - EXIT
log "built in $(( $(date +%s) - started )) s"
echo "$OUT/helm"
