#!/usr/bin/env bash
# Build Kueue's scheduler performance runner and its minimal controller from the Go module
# sigs.k8s.io/kueue, or find them in the cache, and print the cache entry's directory:
#
#   hack/kueue/build.sh            -> ${TOPOGATE_CACHE:-~/.cache/topogate}/kueue/kueue-<v>
#     bin/runner                      test/performance/scheduler/runner
#     bin/minimalkueue                test/performance/scheduler/minimalkueue, as released
#                                     (client QPS 50 / burst 100, hard-coded)
#     bin/minimalkueue-qps300-burst500  the same source with only those two constants changed
#                                     to Kueue's deployed default (300/500), so both client
#                                     budgets can be compared on both sides
#     src/                            the module's source (CRDs, configs, PROJECT_DIR)
#
# Used by hack/kueue_side.sh and hack/bench_kueue_scenario.py. The module's own go.mod (with its
# replace lines) is the main module: the source is copied out of the read-only module cache and
# built in place. A warm machine returns at once; a cold one needs the Go module proxy and many
# minutes on a small machine.
set -euo pipefail

KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
CACHE=${TOPOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topogate}
OUT=$CACHE/kueue/kueue-$KUEUE_VERSION
VARIANT=minimalkueue-qps300-burst500
TOOLS="runner minimalkueue $VARIANT"

complete() {
  local tool
  for tool in $TOOLS; do [ -x "$OUT/bin/$tool" ] || return 1; done
  [ -d "$OUT/src/config/components/crd/bases" ]
}
if complete; then
  echo "$OUT"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
command -v go >/dev/null || { echo "kueue/build.sh: go is not installed" >&2; exit 1; }
log() { echo "kueue/build.sh: $*" >&2; }
started=$(date +%s)
mkdir -p "$OUT"
staging=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'chmod -R u+w "$staging" 2>/dev/null; rm -rf "$staging"' EXIT

log "downloading sigs.k8s.io/kueue $KUEUE_VERSION"
dir=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
[ -d "$dir" ] || { echo "kueue/build.sh: the module proxy gave no source for $KUEUE_VERSION" >&2; exit 1; }
cp -r "$dir" "$staging/src"
chmod -R u+w "$staging/src"
cd "$staging/src"
mkdir -p "$staging/bin"
log "compiling the runner and minimalkueue $KUEUE_VERSION (cold: many minutes)"
go build -p 2 -trimpath -ldflags "-s -w" -o "$staging/bin/" \
  ./test/performance/scheduler/runner ./test/performance/scheduler/minimalkueue

# The variant: the two hard-coded client limits, nothing else. Fail loudly if the release no
# longer has them in this form, rather than building an unpatched copy under the patched name.
main=test/performance/scheduler/minimalkueue/main.go
cp "$main" "$staging/main.go.orig"
sed -i -e 's/^\(\s*kubeConfig\.QPS = \)50$/\1300/' -e 's/^\(\s*kubeConfig\.Burst = \)100$/\1500/' "$main"
if [ "$(diff "$staging/main.go.orig" "$main" | grep -c '^>')" != 2 ]; then
  echo "kueue/build.sh: $main has no 'kubeConfig.QPS = 50' / 'kubeConfig.Burst = 100' to patch" >&2
  exit 1
fi
go build -p 2 -trimpath -ldflags "-s -w" -o "$staging/bin/$VARIANT" ./test/performance/scheduler/minimalkueue
# The source stays as released: only the variant's binary carries the patch.
cp "$staging/main.go.orig" "$main"
rm "$staging/main.go.orig"

chmod -R u+w "$OUT/bin" "$OUT/src" 2>/dev/null || true
rm -rf "$OUT/bin" "$OUT/src"
mv "$staging/bin" "$staging/src" "$OUT/"
rmdir "$staging"
trap - EXIT
log "built in $(( $(date +%s) - started )) s"
echo "$OUT"
