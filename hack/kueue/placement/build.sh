#!/usr/bin/env bash
# Build the Go side of hack/bench_placement.py --kueue (this folder's main.go against
# sigs.k8s.io/kueue v0.19.0) into the versioned cache, never into the repository, and print the
# binary's path:
#
#   hack/kueue/placement/build.sh -> ${TOPOGATE_CACHE:-~/.cache/topogate}/kueue/placement-kueue-v0.19.0-<hash>/kueue-placement
#
# The key holds the Kueue version and a hash of main.go and go.mod, so an edited harness is
# rebuilt and a warm machine returns at once. A cold one needs the Go module proxy.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
KUEUE_VERSION=v0.19.0
CACHE=${TOPOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topogate}
hash=$(cat "$here/main.go" "$here/go.mod" | sha256sum | cut -c1-12)
OUT=$CACHE/kueue/placement-kueue-$KUEUE_VERSION-$hash
if [ -x "$OUT/kueue-placement" ]; then
  echo "$OUT/kueue-placement"
  exit 0
fi
command -v go >/dev/null || { echo "kueue/placement/build.sh: go is not installed" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$OUT"
staging=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$staging"' EXIT
# go.sum and the resolved requirements live in the staging copy, so the repository keeps only
# the one requirement that matters (the Kueue version).
cp "$here/main.go" "$here/go.mod" "$staging/"
cd "$staging"
echo "kueue/placement/build.sh: resolving modules and compiling against Kueue $KUEUE_VERSION" >&2
go mod tidy >&2
go build -p 2 -trimpath -ldflags "-s -w" -o "$staging/kueue-placement" .
mv "$staging/kueue-placement" "$OUT/kueue-placement"
echo "$OUT/kueue-placement"
