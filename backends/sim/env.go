package sim

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// envModeled are the environment variables (the spec's env:) the model reads.
var envModeled = []string{"NCCL_IB_DISABLE"}

// envOptions returns the backend options rc runs with once its environment is
// taken into account, and notes saying what was read and what was ignored.
// NCCL_IB_DISABLE=1 makes NCCL fall back to sockets between nodes, so the
// inter-node links become the tcp fabric profile, unless the spec measured
// them (inter_node_bus_bw_gbps or nccl_tests output), which stands. Every other
// variable leaves the prediction as it is, and the notes name them.
func envOptions(rc sweeps.RunConfig) (map[string]any, []string) {
	opts := rc.BackendOptions
	if len(rc.Env) == 0 {
		return opts, nil
	}
	var notes []string
	if v, ok := rc.Env["NCCL_IB_DISABLE"]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err != nil || n == 0:
			notes = append(notes, "env NCCL_IB_DISABLE="+v+": InfiniBand stays enabled")
		case rc.Nodes <= 1:
			notes = append(notes, "env NCCL_IB_DISABLE="+v+": one node, no inter-node traffic to change")
		case opts["inter_node_bus_bw_gbps"] != nil || opts["nccl_tests"] != nil:
			notes = append(notes, "env NCCL_IB_DISABLE="+v+": the measured inter-node figures (inter_node_bus_bw_gbps, nccl_tests) stand")
		default:
			opts = maps.Clone(opts)
			if opts == nil {
				opts = map[string]any{}
			}
			opts["inter_node_fabric"] = "tcp"
			notes = append(notes, "env NCCL_IB_DISABLE="+v+": NCCL falls back to sockets between nodes; inter-node collectives use the tcp fabric profile")
		}
	}
	var ignored []string
	for k := range rc.Env {
		if !slices.Contains(envModeled, k) {
			ignored = append(ignored, k)
		}
	}
	if len(ignored) > 0 {
		slices.Sort(ignored)
		notes = append(notes, "the model ignores env "+strings.Join(ignored, ", ")+" (it reads "+strings.Join(envModeled, ", ")+")")
	}
	return opts, notes
}
