#!/usr/bin/env bash
# Kueue's side of the side-by-side benchmark: run Kueue's scheduler performance runner and its
# minimal controller on an envtest API server and etcd from our local control plane's
# binaries, as Kueue's `make run-tas-performance-scheduler` does.
#
#   hack/kueue_side.sh run GENERATOR_CONFIG OUTPUT_DIR [MINIMALKUEUE]
#
# MINIMALKUEUE: minimalkueue (default; client QPS 50 / burst 100 as released) or
# minimalkueue-qps300-burst500 (hack/kueue/build.sh's variant at Kueue's deployed default).
# KUEUE_TAS: true (default; the tas scenario, as run-tas-performance-scheduler) or false (Kueue's
# run-large-scale-performance-scheduler starts minimalkueue without its TAS controllers).
# KUEUE_DIR: hack/kueue/build.sh's output (default: build it, or find it in the cache); its src/
# gives the CRDs and the PROJECT_DIR the runner reads. The run writes OUTPUT_DIR/summary.yaml
# (per workload class: mean time to admission), OUTPUT_DIR/wlStates.csv (per Workload) and
# OUTPUT_DIR/MINIMALKUEUE.stats.yaml (wall, user and system CPU, peak RSS of its whole
# process), which hack/bench_kueue_scenario.py reads.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:?run}
[ "$action" = run ] || { echo "kueue_side.sh: the only action is run" >&2; exit 2; }
config=$(cd "$(dirname "${2:?a generator config}")" && pwd)/$(basename "$2")
artifacts=${3:?an output directory}
minimal=${4:-minimalkueue}
kueue=${KUEUE_DIR:-$(bash hack/kueue/build.sh)}
src=$kueue/src
for tool in runner "$minimal"; do
  [ -x "$kueue/bin/$tool" ] || { echo "kueue_side.sh: $kueue/bin/$tool is missing or not executable" >&2; exit 2; }
done
mkdir -p "$artifacts"
artifacts=$(cd "$artifacts" && pwd)
bin=$(bash hack/controlplane/build.sh)
# Kueue's test helpers find the project by PROJECT_DIR (its Makefile sets it with a slash).
cd "$src"
PROJECT_DIR=$src/ KUBEBUILDER_ASSETS=$bin "$kueue/bin/runner" \
  --o "$artifacts" \
  --crds="$src/config/components/crd/bases" \
  --generatorConfig="$config" \
  --minimalKueue="$kueue/bin/$minimal" \
  --enableTAS="${KUEUE_TAS:-true}" --timeout=30m --withLogs=true --logToFile=true
