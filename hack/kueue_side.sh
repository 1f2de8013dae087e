#!/usr/bin/env bash
# Kueue's side of the side-by-side benchmark: run Kueue's scheduler performance runner and its
# minimal controller on our local control plane's etcd and kube-apiserver, as Kueue's
# `make run-tas-performance-scheduler` does on envtest.
#
#   KUEUE_BIN=DIR hack/kueue_side.sh run KUEUE_CHECKOUT GENERATOR_CONFIG OUTPUT_DIR
#
# KUEUE_BIN holds `runner` and `minimalkueue` built from that checkout's
# test/performance/scheduler (built by you, outside this repository: topogate ships no recipe
# that builds another project's code). The checkout gives the CRDs and PROJECT_DIR the runner
# reads. The run writes OUTPUT_DIR/summary.yaml (per workload class: mean time to admission) and
# OUTPUT_DIR/minimalkueue.stats.yaml (wall, user and system CPU of minimalkueue), which
# hack/bench_kueue_scenario.py reads.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:?run}
[ "$action" = run ] || { echo "kueue_side.sh: the only action is run" >&2; exit 2; }
src=$(cd "${2:?the Kueue checkout}" && pwd)
out=${KUEUE_BIN:?KUEUE_BIN: the directory holding the Kueue runner and minimalkueue}
for tool in runner minimalkueue; do
  [ -x "$out/$tool" ] || { echo "kueue_side.sh: $out/$tool is missing or not executable" >&2; exit 2; }
done

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

