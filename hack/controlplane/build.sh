#!/usr/bin/env bash
# Build the local control plane from Go modules, or find it in the cache, and print its bin dir.
#
#   kube-apiserver, kube-scheduler, from k8s.io/kubernetes
#   kube-controller-manager (a wrapper module with the staging
#                                   replace lines, derived from that release's own go.mod)
#   etcd                            from go.etcd.io/etcd/server/v3 (a wrapper module)
#   kustomize                       sigs.k8s.io/kustomize/kustomize/v5 (go install; renders config/)
#   jobset-controller               sigs.k8s.io/jobset (go install: its go.mod has no replace lines),
#     jobset-crd.yaml               with its CRD and webhook configurations from the same module
#     jobset-webhooks.yaml          (config/components/crd/bases, kustomize build config/components/webhook)
#   lws-controller                  sigs.k8s.io/lws (LeaderWorkerSet; a wrapper module, as JobSet),
#     lws-crd.yaml                  with its CRD and webhook configurations from the same module
#     lws-webhooks.yaml             (config/crd/bases, kustomize build config/webhook)
#   training-operator               github.com/kubeflow/training-operator (Kubeflow v1 jobs; a
#     training-operator-crd.yaml    wrapper module), with its PyTorchJob CRD and validating
#     training-operator-webhooks.yaml  webhooks (manifests/base/crds, kustomize build manifests/base/webhook)
#   kuberay-operator                github.com/ray-project/kuberay/ray-operator (RayCluster, RayJob;
#     kuberay-crd.yaml              a wrapper module) with its CRDs (config/crd/bases); no webhooks
#   mpi-operator                    github.com/kubeflow/mpi-operator (MPIJob kubeflow.org/v2beta1; a
#     mpi-operator-crd.yaml         wrapper module) with its CRD (manifests/base); no webhooks. Built
#                                   from a copy of the module plus mpi-operator-health-port.go (its
#                                   fixed health port 8080 taken from $MPI_OPERATOR_HEALTH_PORT),
#                                   keyed "<v>-healthport"
#   trainer-controller-manager      github.com/kubeflow/trainer/v2 (Kubeflow Trainer v2: TrainJob,
#     trainer-crd.yaml              TrainingRuntime, ClusterTrainingRuntime; a wrapper module) with
#     trainer-webhooks.yaml         its CRDs (manifests/base/crds) and webhooks (manifests/base/webhook)
#
# Outputs live outside the repository, keyed by version:
#   ${TOPOGATE_CACHE:-~/.cache/topogate}/controlplane/kube-<v>-etcd-<v>-kustomize-<v>-jobset-<v>-lws-<v>-training-operator-<v>-kuberay-<v>-mpi-operator-<v>-healthport-trainer-<v>/bin
# A warm machine returns at once; a cold one needs the Go module proxy and many minutes.
set -euo pipefail

# v1.36.3: the module proxy here serves it with all its staging modules, it builds completely
# and the cluster tests pass on it (v1.34.2, the newest full 1.34 here, still builds with
# KUBE_VERSION=v1.34.2). etcd v3.6.16 suits both: 1.34 and 1.36 use the v3.6 client (v3.6.4,
# v3.6.8) and kubeadm pairs them with etcd 3.6.
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
# v5.7.1: the newest kustomize that builds with Go 1.26 (5.8 wants Go 1.27).
KUSTOMIZE_VERSION=${KUSTOMIZE_VERSION:-v5.7.1}
JOBSET_VERSION=${JOBSET_VERSION:-v0.12.0}
# v0.9.0: the newest LeaderWorkerSet the module proxy here serves (v0.10.0 is refused).
LWS_VERSION=${LWS_VERSION:-v0.9.0}
# v1.8.1: the last release of Kubeflow's v1 training-operator (PyTorchJob kubeflow.org/v1); the
# module proxy here serves it (the v2 Trainer moved to github.com/kubeflow/trainer/v2).
TRAINING_OPERATOR_VERSION=${TRAINING_OPERATOR_VERSION:-v1.8.1}
# v1.6.2: the newest ray-operator the module proxy here serves (v1.7.0 is refused).
KUBERAY_VERSION=${KUBERAY_VERSION:-v1.6.2}
# v0.8.2: the MPIJob v2beta1 operator Kueue v0.19.0 builds against; the module proxy serves this
# exact version (its version list answers 403).
MPI_OPERATOR_VERSION=${MPI_OPERATOR_VERSION:-v0.8.2}
# The binary differs from the release's by the health port file: its own key, so that an entry
# built before it is not reused.
MPI_OPERATOR_BUILD=$MPI_OPERATOR_VERSION-healthport
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# v2.2.1: the Trainer Kueue v0.19.0 builds against; the proxy here lists only v2.0.0 but serves
# v2.1.0, v2.2.0 and v2.2.1 by exact version (v2.0.0 cannot put labels on a TrainJob's pods).
TRAINER_VERSION=${TRAINER_VERSION:-v2.2.1}
CACHE=${TOPOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topogate}
OUT=$CACHE/controlplane/kube-$KUBE_VERSION-etcd-$ETCD_VERSION-kustomize-$KUSTOMIZE_VERSION-jobset-$JOBSET_VERSION-lws-$LWS_VERSION-training-operator-$TRAINING_OPERATOR_VERSION-kuberay-$KUBERAY_VERSION-mpi-operator-$MPI_OPERATOR_BUILD-trainer-$TRAINER_VERSION
BIN=$OUT/bin

KUBE_TOOLS="kube-apiserver kube-scheduler kube-controller-manager"
complete() {
  local tool
  for tool in $KUBE_TOOLS etcd kustomize jobset-controller lws-controller training-operator kuberay-operator mpi-operator trainer-controller-manager; do
    [ -x "$1/$tool" ] || return 1
  done
  [ -s "$1/jobset-crd.yaml" ] && [ -s "$1/jobset-webhooks.yaml" ] && [ -s "$1/lws-crd.yaml" ] &&
    [ -s "$1/lws-webhooks.yaml" ] && [ -s "$1/training-operator-crd.yaml" ] &&
    [ -s "$1/training-operator-webhooks.yaml" ] && [ -s "$1/kuberay-crd.yaml" ] &&
    [ -s "$1/mpi-operator-crd.yaml" ] && [ -s "$1/trainer-crd.yaml" ] && [ -s "$1/trainer-webhooks.yaml" ]
}
if complete "$BIN"; then
  echo "$BIN"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 1; }
log() { echo "build.sh: $*" >&2; }
mkdir -p "$OUT"
staging=$(mktemp -d "$OUT/.bin.XXXXXX")
trap 'rm -rf "$staging"' EXIT

build_kube() {
  local src=$CACHE/src/kube-$KUBE_VERSION minor=${KUBE_VERSION#v1.}
  mkdir -p "$src" && cd "$src"
  if [ ! -f go.sum ]; then
    rm -f go.mod
    go mod init topogate.local/kubebins >/dev/null 2>&1
    go mod edit -go=1.24.0
    local upstream
    upstream=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
    # Go ignores a dependency's replace lines: every staging module must be replaced here.
    local module
    for module in $(sed -n 's|^[[:space:]]*k8s.io/\([a-z0-9-]*\) => ./staging/src/k8s.io/.*|\1|p' "$upstream"); do
      go mod edit -replace "k8s.io/$module=k8s.io/$module@v0.$minor"
    done
    local godebug
    godebug=$(sed -n 's/^godebug default=\(.*\)$/\1/p' "$upstream")
    if [ -n "$godebug" ]; then go mod edit -godebug "default=$godebug"; fi
    go mod edit -require "k8s.io/kubernetes@$KUBE_VERSION"
  fi
  local tool packages=() missing=()
  for tool in $KUBE_TOOLS; do
    # -tool keeps each command's dependencies in go.mod, so an older source dir learns new tools.
    go mod edit -tool "k8s.io/kubernetes/cmd/$tool"
    [ -x "$staging/$tool" ] || { packages+=("k8s.io/kubernetes/cmd/$tool"); missing+=("$tool"); }
  done
  log "resolving k8s.io/kubernetes $KUBE_VERSION modules"
  go mod tidy
  log "compiling ${missing[*]} $KUBE_VERSION (cold: many minutes)"
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*}"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
  go build -p 2 -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldflags" -o "$staging/" \
    "${packages[@]}"
}

# A wrapper module in the cache's src/ that requires MODULE@VERSION and names it as a tool;
# the caller is left in its directory to build there.
tool_module() {
  local name=$1 module=$2 version=$3 package=${4:-$2}
  local src=$CACHE/src/$name-$version
  mkdir -p "$src" && cd "$src"
  if [ ! -f go.sum ]; then
    rm -f go.mod
    go mod init "topogate.local/${name}bin" >/dev/null 2>&1
    go mod edit -require "$module@$version" -tool "$package"
    log "resolving $name $version modules"
    go mod tidy
  fi
}

build_etcd() {
  tool_module etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
  log "compiling etcd $ETCD_VERSION"
  go build -p 2 -trimpath -ldflags "-s -w" -o "$staging/etcd" go.etcd.io/etcd/server/v3
}

build_kustomize() {
  log "compiling kustomize $KUSTOMIZE_VERSION"
  GOBIN="$staging" go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
}

build_jobset() {
  # A wrapper module rather than `go install …@version`: that looks up the module's version
  # list for deprecations, which a proxy serving only pinned versions refuses (403).
  tool_module jobset sigs.k8s.io/jobset "$JOBSET_VERSION"
  log "compiling the JobSet controller $JOBSET_VERSION"
  local ldflags="-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION"
  go build -p 2 -trimpath -ldflags "$ldflags" -o "$staging/jobset-controller" sigs.k8s.io/jobset
  # The CRD and webhook configurations of the same release, as its own manifests install them
  # (the CRD without the conversion-webhook patch: JobSet serves a single version).
  local dir
  dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)
  cp "$dir/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$staging/jobset-crd.yaml"
  "$staging/kustomize" build "$dir/config/components/webhook" >"$staging/jobset-webhooks.yaml"
  chmod 644 "$staging/jobset-crd.yaml" "$staging/jobset-webhooks.yaml"
}

build_lws() {
  tool_module lws sigs.k8s.io/lws "$LWS_VERSION" sigs.k8s.io/lws/cmd
  log "compiling the LeaderWorkerSet controller $LWS_VERSION"
  go build -p 2 -trimpath -ldflags "-s -w" -o "$staging/lws-controller" sigs.k8s.io/lws/cmd
  local dir
  dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/lws)
  # Both CRDs of the release: its controller also watches DisaggregatedSets, and stops when
  # that kind is not served.
  cat "$dir/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" \
    <(echo ---) "$dir/config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml" \
    >"$staging/lws-crd.yaml"
  "$staging/kustomize" build "$dir/config/webhook" >"$staging/lws-webhooks.yaml"
  chmod 644 "$staging/lws-crd.yaml" "$staging/lws-webhooks.yaml"
}

build_training_operator() {
  tool_module training-operator github.com/kubeflow/training-operator "$TRAINING_OPERATOR_VERSION" \
    github.com/kubeflow/training-operator/cmd/training-operator.v1
  log "compiling the Kubeflow training-operator $TRAINING_OPERATOR_VERSION"
  go build -p 2 -trimpath -ldflags "-s -w" -o "$staging/training-operator" \
    github.com/kubeflow/training-operator/cmd/training-operator.v1
  local dir
  dir=$(go list -m -f '{{.Dir}}' github.com/kubeflow/training-operator)
  # PyTorchJob's CRD only: the tests run the operator with --enable-scheme=pytorchjob.
  cp "$dir/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" "$staging/training-operator-crd.yaml"
  "$staging/kustomize" build "$dir/manifests/base/webhook" >"$staging/training-operator-webhooks.yaml"
  chmod 644 "$staging/training-operator-crd.yaml" "$staging/training-operator-webhooks.yaml"
}

build_kuberay() {
  tool_module kuberay github.com/ray-project/kuberay/ray-operator "$KUBERAY_VERSION"
  log "compiling the KubeRay operator $KUBERAY_VERSION"
  go build -p 2 -trimpath -ldflags "-s -w" -o "$staging/kuberay-operator" \
    github.com/ray-project/kuberay/ray-operator
  local dir crd
  dir=$(go list -m -f '{{.Dir}}' github.com/ray-project/kuberay/ray-operator)
  # Every CRD of the release: the operator watches RayServices too, and stops when that kind
  # is not served.
  for crd in "$dir"/config/crd/bases/ray.io_*.yaml; do
    cat "$crd"
    echo ---
  done >"$staging/kuberay-crd.yaml"
  chmod 644 "$staging/kuberay-crd.yaml"
}

build_mpi_operator() {
  tool_module mpi-operator github.com/kubeflow/mpi-operator "$MPI_OPERATOR_VERSION" \
    github.com/kubeflow/mpi-operator/cmd/mpi-operator
  local dir copy=$CACHE/src/mpi-operator-$MPI_OPERATOR_VERSION/module
  go mod edit -dropreplace github.com/kubeflow/mpi-operator  # left by a build that failed
  dir=$(go list -m -f '{{.Dir}}' github.com/kubeflow/mpi-operator)
  # Go builds no added file into a module of its module cache: a writable copy, replaced in.
  rm -rf "$copy"
  cp -r "$dir" "$copy"
  chmod -R u+w "$copy"
  cp "$HERE/mpi-operator-health-port.go" "$copy/cmd/mpi-operator/app/zz_topogate_health_port.go"
  go mod edit -replace "github.com/kubeflow/mpi-operator=./module"
  log "compiling the MPI operator $MPI_OPERATOR_VERSION (its health port movable)"
  go build -p 2 -trimpath -ldflags "-s -w" -o "$staging/mpi-operator" \
    github.com/kubeflow/mpi-operator/cmd/mpi-operator
  go mod edit -dropreplace github.com/kubeflow/mpi-operator
  # The v2beta1 CRD; training-operator's own MPIJob CRD (v1, the same name mpijobs.kubeflow.org)
  # is never installed: the plane runs training-operator for PyTorchJob only.
  cp "$dir/manifests/base/kubeflow.org_mpijobs.yaml" "$staging/mpi-operator-crd.yaml"
  chmod 644 "$staging/mpi-operator-crd.yaml"
}

build_trainer() {
  tool_module trainer github.com/kubeflow/trainer/v2 "$TRAINER_VERSION" \
    github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
  log "compiling the Kubeflow Trainer controller manager $TRAINER_VERSION"
  go build -p 2 -trimpath -ldflags "-s -w" -o "$staging/trainer-controller-manager" \
    github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
  local dir crd
  dir=$(go list -m -f '{{.Dir}}' github.com/kubeflow/trainer/v2)
  for crd in "$dir"/manifests/base/crds/trainer.kubeflow.org_*.yaml; do
    cat "$crd"
    echo ---
  done >"$staging/trainer-crd.yaml"
  "$staging/kustomize" build "$dir/manifests/base/webhook" >"$staging/trainer-webhooks.yaml"
  chmod 644 "$staging/trainer-crd.yaml" "$staging/trainer-webhooks.yaml"
}

started=$(date +%s)
# Reuse what previous cache entries of the same versions already built (only the missing
# parts are compiled): each part is keyed by its own version in the entry's name.
reuse() {
  local pattern=$1 previous
  shift
  for previous in "$CACHE"/controlplane/$pattern/bin; do
    for part in "$@"; do
      if [ ! -e "$staging/$part" ] && [ -s "$previous/$part" ]; then cp "$previous/$part" "$staging/"; fi
    done
  done
}
reuse "*-etcd-$ETCD_VERSION-*" etcd
reuse "kube-$KUBE_VERSION-*" $KUBE_TOOLS
reuse "*-kustomize-$KUSTOMIZE_VERSION*" kustomize
reuse "*-jobset-$JOBSET_VERSION*" jobset-controller jobset-crd.yaml jobset-webhooks.yaml
reuse "*-lws-$LWS_VERSION*" lws-controller lws-crd.yaml lws-webhooks.yaml
reuse "*-training-operator-$TRAINING_OPERATOR_VERSION*" training-operator training-operator-crd.yaml \
  training-operator-webhooks.yaml
reuse "*-kuberay-$KUBERAY_VERSION*" kuberay-operator kuberay-crd.yaml
reuse "*-mpi-operator-$MPI_OPERATOR_BUILD-*" mpi-operator mpi-operator-crd.yaml
reuse "*-trainer-$TRAINER_VERSION*" trainer-controller-manager trainer-crd.yaml trainer-webhooks.yaml
[ -x "$staging/etcd" ] || build_etcd
for tool in $KUBE_TOOLS; do
  if [ ! -x "$staging/$tool" ]; then build_kube; break; fi
done
[ -x "$staging/kustomize" ] || build_kustomize
[ -x "$staging/jobset-controller" ] && [ -s "$staging/jobset-webhooks.yaml" ] || build_jobset
[ -x "$staging/lws-controller" ] && [ -s "$staging/lws-webhooks.yaml" ] || build_lws
[ -x "$staging/training-operator" ] && [ -s "$staging/training-operator-webhooks.yaml" ] ||
  build_training_operator
[ -x "$staging/kuberay-operator" ] && [ -s "$staging/kuberay-crd.yaml" ] || build_kuberay
[ -x "$staging/mpi-operator" ] && [ -s "$staging/mpi-operator-crd.yaml" ] || build_mpi_operator
[ -x "$staging/trainer-controller-manager" ] && [ -s "$staging/trainer-webhooks.yaml" ] ||
  build_trainer
chmod 755 "$staging"
rm -rf "$BIN"
mv "$staging" "$BIN"
trap - EXIT
log "built in $(( $(date +%s) - started )) s"
echo "$BIN"
