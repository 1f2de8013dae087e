module topogate.local/kueueplacement

go 1.26.0

require sigs.k8s.io/kueue v0.19.0
