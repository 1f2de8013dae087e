#!/usr/bin/env bash
# Build KWOK's controller from the Go module sigs.k8s.io/kwok, or find it in the cache, and
# print the cache entry's directory:
#
#   hack/kwok/build.sh             -> ${TOPOGATE_CACHE:-~/.cache/topogate}/kwok/kwok-<v>
#     bin/kwok                        cmd/kwok (manages fake nodes and their pods through the API)
#     stages/node-initialize.yaml     kustomize/stage/node/fast: a new node turns Ready
#     stages/pod-ready.yaml           kustomize/stage/pod/fast: a bound pod goes Pending -> Running
#     stages/pod-delete.yaml          kustomize/stage/pod/fast: a deleted pod goes away
#
# A bench-only tool (hack/bench_kwok.py): not part of the test control plane nor of .ci/run.
# The fast pod stages' pod-complete is left out on purpose: it turns every Job's pod Succeeded
# at once, and the bench needs admitted gangs to stay Running. The node heartbeat stage is left
# out too (100,000 leases renewed every few seconds would load the API server more than the
# workload under test); the bench runs kube-controller-manager without its node lifecycle
# controller instead, so nodes stay Ready.
#
# The module has no replace lines; its source is copied out of the read-only module cache and
# built in place. A warm machine returns at once; a cold one needs the Go module proxy.
set -euo pipefail

KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
CACHE=${TOPOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topogate}
OUT=$CACHE/kwok/kwok-$KWOK_VERSION
STAGES="node/fast/node-initialize pod/fast/pod-ready pod/fast/pod-delete"

complete() {
  local stage
  [ -x "$OUT/bin/kwok" ] || return 1
  for stage in $STAGES; do [ -s "$OUT/stages/${stage##*/}.yaml" ] || return 1; done
}
if complete; then
  echo "$OUT"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
command -v go >/dev/null || { echo "kwok/build.sh: go is not installed" >&2; exit 1; }
log() { echo "kwok/build.sh: $*" >&2; }
started=$(date +%s)
mkdir -p "$OUT"
staging=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'chmod -R u+w "$staging" 2>/dev/null; rm -rf "$staging"' EXIT

log "downloading sigs.k8s.io/kwok $KWOK_VERSION"
dir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
[ -d "$dir" ] || { echo "kwok/build.sh: the module proxy gave no source for $KWOK_VERSION" >&2; exit 1; }
cp -r "$dir" "$staging/src"
chmod -R u+w "$staging/src"
mkdir -p "$staging/bin" "$staging/stages"
for stage in $STAGES; do
  cp "$staging/src/kustomize/stage/$stage.yaml" "$staging/stages/"
done
cd "$staging/src"
log "compiling cmd/kwok $KWOK_VERSION (cold: several minutes)"
go build -p 2 -trimpath -ldflags "-s -w" -o "$staging/bin/kwok" ./cmd/kwok

chmod -R u+w "$OUT/bin" "$OUT/stages" 2>/dev/null || true
rm -rf "$OUT/bin" "$OUT/stages"
mv "$staging/bin" "$staging/stages" "$OUT/"
trap - EXIT
chmod -R u+w "$staging" && rm -rf "$staging"
log "built in $(( $(date +%s) - started )) s"
echo "$OUT"
