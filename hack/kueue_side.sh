#!/usr/bin/env bash
# Kueue's side of the side-by-side benchmark: build Kueue's scheduler performance runner and
# its minimal controller from a Kueue checkout (cached outside the repository, keyed by the
# checkout's commit), and run a generator config on our local control plane's etcd and
# kube-apiserver, as Kueue's `make run-tas-performance-scheduler` does on envtest.
#
#   hack/kueue_side.sh build KUEUE_CHECKOUT
#   hack/kueue_side.sh run KUEUE_CHECKOUT GENERATOR_CONFIG OUTPUT_DIR
#
# The run writes OUTPUT_DIR/summary.yaml (per workload class: mean time to admission) and
# OUTPUT_DIR/minimalkueue.stats.yaml (wall, user and system CPU of minimalkueue), which
# hack/bench_kueue_scenario.py reads.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:?build or run}
src=$(cd "${2:?the Kueue checkout}" && pwd)
CACHE=${TOPOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topogate}
commit=$(git -C "$src" rev-parse HEAD)
out=$CACHE/kueue/$commit
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

# Modules the Go module proxy refused here (403) at the versions Kueue's go.mod names, with the
# newest version it served; the runner and minimalkueue build with them. Overridable.
KUEUE_REPLACE=${KUEUE_REPLACE:-github.com/ray-project/kuberay/ray-operator@v1.6.2 sigs.k8s.io/lws@v0.9.0}

if [ ! -x "$out/runner" ] || [ ! -x "$out/minimalkueue" ]; then
  echo "kueue_side.sh: building Kueue's runner and minimalkueue at $commit (minutes)" >&2
  mkdir -p "$out/mod"
  # A go.mod of our own next to the checkout's (-modfile): the checkout stays untouched.
  cp "$src/go.mod" "$out/mod/go.mod"
  cp "$src/go.sum" "$out/mod/go.sum"
  for pin in $KUEUE_REPLACE; do
    (cd "$src" && go mod edit -modfile="$out/mod/go.mod" -replace "${pin%@*}=$pin")
  done
  (cd "$src" \
    && go build -modfile="$out/mod/go.mod" -o "$out/runner.tmp" ./test/performance/scheduler/runner \
    && go build -modfile="$out/mod/go.mod" -o "$out/minimalkueue.tmp" \
      ./test/performance/scheduler/minimalkueue)
  mv "$out/runner.tmp" "$out/runner"
  mv "$out/minimalkueue.tmp" "$out/minimalkueue"
fi
[ "$action" = build ] && { echo "$out"; exit 0; }

config=$(cd "$(dirname "${3:?a generator config}")" && pwd)/$(basename "$3")
artifacts=${4:?an output directory}
mkdir -p "$artifacts"
artifacts=$(cd "$artifacts" && pwd)
bin=$(bash hack/controlplane/build.sh)
# Kueue's test helpers find the project by PROJECT_DIR (its Makefile sets it with a slash).
cd "$src"
PROJECT_DIR=$src/ KUBEBUILDER_ASSETS=$bin "$out/runner" \
  --o "$artifacts" \
  --crds="$src/config/components/crd/bases" \
  --generatorConfig="$config" \
  --minimalKueue="$out/minimalkueue" \
  --enableTAS=true --timeout=30m --withLogs=true --logToFile=true
