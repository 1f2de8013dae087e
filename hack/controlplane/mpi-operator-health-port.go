// Added to github.com/kubeflow/mpi-operator/cmd/mpi-operator/app by hack/controlplane/build.sh
// (topogate's own file, not upstream code): the operator serves its health check on port 8080
// of every interface, a constant of that package with no flag, so a second local control plane
// on the same machine could not start its operator. MPI_OPERATOR_HEALTH_PORT, when set, moves
// it (package variables are set before init runs).
package app

import (
	"os"
	"strconv"
)

func init() {
	if port, err := strconv.Atoi(os.Getenv("MPI_OPERATOR_HEALTH_PORT")); err == nil && port > 0 {
		healthCheckPort = port
	}
}
