// Command kueue-placement times Kueue's own TAS placement code on a cluster and gang written by
// hack/bench_placement.py, so both sides see the same input in the same sitting.
//
//	kueue-placement -in case.json -out result.json -repeats 7
//
// It builds Kueue's scheduler cache through its exported API (Topology, ResourceFlavor,
// ClusterQueue, nodes, running non-TAS pods), then times Cache.Snapshot (the per-cycle snapshot
// build, which constructs the TASFlavorSnapshot) and TASFlavorSnapshot.FindTopologyAssignmentsForFlavor
// per case, the median of -repeats calls each. One-time setup (decoding, object creation, cache
// fill) is not timed, as on the Python side. No Workload is passed to the call, so Kueue's
// per-workload node-match cache (TASCacheNodeMatchResults) never answers a repeat from memory:
// every call does the work a first call in a fresh scheduling cycle does.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/resources"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing"
	utiltestingapi "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"
)

// Quantities are integers: "cpu" in millicores, every other resource in its base unit.
type input struct {
	Levels  []string      `json:"levels"`
	Nodes   []nodeSpec    `json:"nodes"`
	Pods    []podSpec     `json:"pods"`
	Cases   []caseSpec    `json:"cases"`
	Repeats int           `json:"repeats"`
	Flavor  flavorOptions `json:"flavor"`
}

type flavorOptions struct {
	NodeLabels map[string]string `json:"node_labels"`
}

type nodeSpec struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels"`
	Allocatable map[string]int64  `json:"allocatable"`
}

type podSpec struct {
	Name     string           `json:"name"`
	Node     string           `json:"node"`
	Requests map[string]int64 `json:"requests"`
}

type caseSpec struct {
	Name         string            `json:"name"`
	Count        int32             `json:"count"`
	Requests     map[string]int64  `json:"requests"`
	Mode         string            `json:"mode"` // required | preferred | unconstrained
	Level        string            `json:"level"`
	NodeSelector map[string]string `json:"node_selector"`
}

type domainCount struct {
	Values []string `json:"values"`
	Count  int32    `json:"count"`
}

type caseResult struct {
	Name     string    `json:"name"`
	MedianMS float64   `json:"median_ms"`
	TimesMS  []float64 `json:"times_ms"`
	// Process CPU time per call (every thread, the garbage collector's included): on a
	// loaded machine wall time also counts waiting for a core.
	CPUMedianMS float64       `json:"cpu_median_ms"`
	CPUTimesMS  []float64     `json:"cpu_times_ms"`
	Fits        bool          `json:"fits"`
	Reason      string        `json:"reason,omitempty"`
	Levels      []string      `json:"levels,omitempty"`
	Domains     []domainCount `json:"domains,omitempty"`
}

type output struct {
	Kueue           string       `json:"kueue"`
	Nodes           int          `json:"nodes"`
	BuildMS         float64      `json:"build_ms"`
	BuildTimesMS    []float64    `json:"build_times_ms"`
	BuildCPUMS      float64      `json:"build_cpu_ms"`
	BuildCPUTimesMS []float64    `json:"build_cpu_times_ms"`
	Cases           []caseResult `json:"cases"`
}

func quantity(name string, v int64) resource.Quantity {
	if name == string(corev1.ResourceCPU) {
		return *resource.NewMilliQuantity(v, resource.DecimalSI)
	}
	if name == string(corev1.ResourceMemory) {
		return *resource.NewQuantity(v, resource.BinarySI)
	}
	return *resource.NewQuantity(v, resource.DecimalSI)
}

func resourceList(m map[string]int64) corev1.ResourceList {
	rl := corev1.ResourceList{}
	for k, v := range m {
		rl[corev1.ResourceName(k)] = quantity(k, v)
	}
	return rl
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// cpuMS is the process's user+system CPU time so far, in milliseconds.
func cpuMS() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

func run(in *input) (*output, error) {
	ctx := ctrllog.IntoContext(context.Background(), logr.Discard())
	log := logr.Discard()
	const flavorName, topologyName, cqName = "bench-flavor", "bench", "bench-cq"

	// Kueue's own fake client (with the field indexes its cache lists by); nothing is stored.
	cl := utiltesting.NewClientBuilder().Build()
	cache := schdcache.New(cl)

	topology := utiltestingapi.MakeTopology(topologyName).Levels(in.Levels...).Obj()
	rf := utiltestingapi.MakeResourceFlavor(flavorName).TopologyName(topologyName)
	for k, v := range in.Flavor.NodeLabels {
		rf = rf.NodeLabel(k, v)
	}
	// Quota never limits: this measures placement, not admission.
	names := map[string]bool{}
	for _, n := range in.Nodes {
		for k := range n.Allocatable {
			names[k] = true
		}
	}
	fq := utiltestingapi.MakeFlavorQuotas(flavorName)
	sorted := make([]string, 0, len(names))
	for k := range names {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		fq = fq.Resource(corev1.ResourceName(k), "1000000000")
	}
	cq := utiltestingapi.MakeClusterQueue(cqName).ResourceGroup(*fq.Obj()).Obj()

	cache.AddOrUpdateTopology(log, topology)
	cache.AddOrUpdateResourceFlavor(log, rf.Obj())
	if err := cache.AddClusterQueue(ctx, cq); err != nil {
		return nil, fmt.Errorf("ClusterQueue %s: %w", cqName, err)
	}
	for _, n := range in.Nodes {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels},
			Status: corev1.NodeStatus{
				Allocatable: resourceList(n.Allocatable),
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			},
		}
		cache.TASCache().SyncNode(node)
	}
	for _, p := range in.Pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: "bench"},
			Spec: corev1.PodSpec{
				NodeName:   p.Node,
				Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: resourceList(p.Requests)}}},
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
		cache.TASCache().Update(pod, log)
	}

	repeats := max(1, in.Repeats)
	out := &output{Kueue: "v0.19.0", Nodes: len(in.Nodes)}
	var tas *schdcache.TASFlavorSnapshot
	for range repeats {
		c0, t0 := cpuMS(), time.Now()
		snap, err := cache.Snapshot(ctx)
		elapsed := time.Since(t0)
		out.BuildCPUTimesMS = append(out.BuildCPUTimesMS, cpuMS()-c0)
		if err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		out.BuildTimesMS = append(out.BuildTimesMS, ms(elapsed))
		cqs := snap.ClusterQueue(cqName)
		if cqs == nil {
			return nil, fmt.Errorf("ClusterQueue %s is inactive in Kueue's snapshot", cqName)
		}
		tas = cqs.TASFlavors[flavorName]
		if tas == nil {
			return nil, fmt.Errorf("no TAS snapshot for flavor %s", flavorName)
		}
	}
	out.BuildMS = median(out.BuildTimesMS)
	out.BuildCPUMS = median(out.BuildCPUTimesMS)

	for _, c := range in.Cases {
		ps := utiltestingapi.MakePodSet("workers", int(c.Count))
		for k, v := range c.Requests {
			q := quantity(k, v)
			ps = ps.Request(corev1.ResourceName(k), q.String())
		}
		switch c.Mode {
		case "required":
			ps = ps.RequiredTopologyRequest(c.Level)
		case "preferred":
			ps = ps.PreferredTopologyRequest(c.Level)
		case "unconstrained":
			ps = ps.UnconstrainedTopologyRequest()
		default:
			return nil, fmt.Errorf("case %q: mode %q is not required, preferred or unconstrained", c.Name, c.Mode)
		}
		if len(c.NodeSelector) > 0 {
			ps = ps.NodeSelector(c.NodeSelector)
		}
		podSet := ps.Obj()
		perPod := resources.MapRequests{}
		for k, v := range c.Requests {
			perPod[corev1.ResourceName(k)] = v
		}
		requests := resources.NewRequestsFromMap(perPod)
		reqs := schdcache.FlavorTASRequests{{
			PodSet:            podSet,
			SinglePodRequests: requests,
			Count:             c.Count,
			Flavor:            flavorName,
		}}
		res := caseResult{Name: c.Name}
		var result schdcache.TASAssignmentsResult
		for range repeats {
			c0, t0 := cpuMS(), time.Now()
			result = tas.FindTopologyAssignmentsForFlavor(ctx, reqs)
			res.TimesMS = append(res.TimesMS, ms(time.Since(t0)))
			res.CPUTimesMS = append(res.CPUTimesMS, cpuMS()-c0)
		}
		res.MedianMS = median(res.TimesMS)
		res.CPUMedianMS = median(res.CPUTimesMS)
		if f := result.Failure(); f != nil {
			res.Reason = f.Reason
		} else if a := result["workers"].TopologyAssignment; a != nil {
			res.Fits = true
			res.Levels = a.Levels
			for _, d := range a.Domains {
				res.Domains = append(res.Domains, domainCount{Values: d.Values, Count: d.Count})
			}
		} else {
			res.Reason = "no assignment and no failure reason"
		}
		out.Cases = append(out.Cases, res)
	}
	return out, nil
}

func main() {
	inPath := flag.String("in", "", "cluster and cases (JSON, from hack/bench_placement.py --kueue)")
	outPath := flag.String("out", "", "where to write the timings and answers (JSON); stdout if empty")
	flag.Parse()
	if *inPath == "" {
		fmt.Fprintln(os.Stderr, "kueue-placement: -in is required")
		os.Exit(2)
	}
	raw, err := os.ReadFile(*inPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kueue-placement: %v\n", err)
		os.Exit(2)
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		fmt.Fprintf(os.Stderr, "kueue-placement: %s: %v\n", *inPath, err)
		os.Exit(2)
	}
	out, err := run(&in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kueue-placement: %s: %v\n", *inPath, err)
		os.Exit(1)
	}
	data, err := json.Marshal(out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kueue-placement: %v\n", err)
		os.Exit(1)
	}
	if *outPath == "" {
		_, _ = os.Stdout.Write(append(data, '\n'))
		return
	}
	if err := os.WriteFile(*outPath, data, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "kueue-placement: %v\n", err)
		os.Exit(1)
	}
}
