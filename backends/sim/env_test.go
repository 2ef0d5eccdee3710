package sim

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
)

// TestNCCLIBDisableFallsBackToTCP: NCCL_IB_DISABLE=1 in a two-node run's env
// makes the inter-node collectives TCP's, slower; other variables are named as
// ignored; a one-node run is unchanged.
func TestNCCLIBDisableFallsBackToTCP(t *testing.T) {
	run := func(nodes int, env map[string]string) results.Result {
		rc := cfg("llama-1b", 16, "full_shard")
		rc.Nodes, rc.GPUsPerNode = nodes, 16/nodes
		rc.Env = env
		rc.AssignID()
		require.NoError(t, New().Validate(context.Background(), rc))
		res, err := New().Run(context.Background(), rc, backends.RunEnv{}, nil)
		require.NoError(t, err)
		require.Equal(t, results.StatusOK, res.Status, res.Error)
		return res
	}
	run8 := func(env map[string]string) results.Result {
		rc := cfg("llama-1b", 8, "full_shard")
		rc.Env = env
		res, err := New().Run(context.Background(), rc, backends.RunEnv{}, nil)
		require.NoError(t, err)
		require.Equal(t, results.StatusOK, res.Status, res.Error)
		return res
	}
	ib := run(2, nil)
	tcp := run(2, map[string]string{"NCCL_IB_DISABLE": "1", "NCCL_ALGO": "Ring"})
	assert.Greater(t, tcp.Steps[0].StepTimeS, ib.Steps[0].StepTimeS, "TCP between nodes is slower than InfiniBand")
	notes, _ := tcp.Extra["notes"].([]string)
	assert.Contains(t, notes, "env NCCL_IB_DISABLE=1: NCCL falls back to sockets between nodes; inter-node collectives use the tcp fabric profile")
	assert.Contains(t, notes, "the model ignores env NCCL_ALGO (it reads NCCL_IB_DISABLE)")

	one := run8(nil)
	oneOff := run8(map[string]string{"NCCL_IB_DISABLE": "1"})
	assert.Equal(t, one.Steps[0].StepTimeS, oneOff.Steps[0].StepTimeS, "one node has no inter-node traffic")
}
