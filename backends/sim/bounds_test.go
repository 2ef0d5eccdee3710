package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestExtremeRunsNeverOverflow is issue 13 §3: seq_len 1e9 with model tiny
// stored peak_mem_reserved_bytes -9223370500853066752 as ok. At the largest
// values the spec allows, every figure is non-negative and the run is
// infeasible; past them the sim refuses the config.
func TestExtremeRunsNeverOverflow(t *testing.T) {
	dir := t.TempDir()
	largest := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(largest, []byte(`{"model_type": "llama", "hidden_size": 262144,
		"num_hidden_layers": 4096, "num_attention_heads": 16384, "intermediate_size": 1048576,
		"vocab_size": 16777216, "max_position_embeddings": 67108864}`), 0o644))

	for _, tc := range []struct {
		name string
		edit func(*sweeps.RunConfig)
	}{
		{"longest sequence on cpu", func(rc *sweeps.RunConfig) {
			rc.Hardware, rc.SeqLen, rc.BatchPerDevice = "cpu", sweeps.MaxSeqLen, sweeps.MaxBatchPerDevice
		}},
		{"longest sequence, fp32 on a GPU", func(rc *sweeps.RunConfig) {
			rc.SeqLen, rc.BatchPerDevice, rc.MixedPrecision = sweeps.MaxSeqLen, sweeps.MaxBatchPerDevice, sweeps.FP32
		}},
		{"largest model, largest world", func(rc *sweeps.RunConfig) {
			rc.Model, rc.SeqLen = largest, sweeps.MaxSeqLen
			rc.Nodes, rc.GPUsPerNode, rc.WorldSize = 128, 1024, sweeps.MaxWorldSize
			rc.BatchPerDevice = 8
		}},
		{"largest model, ddp with grad_accum", func(rc *sweeps.RunConfig) {
			rc.Model, rc.Sharding, rc.GradAccum, rc.Hardware = largest, sweeps.DDP, sweeps.MaxGradAccum, "cpu"
			rc.GPUsPerNode, rc.WorldSize = sweeps.MaxGPUsPerNode, sweeps.MaxGPUsPerNode
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := cfg("tiny", 1, sweeps.FullShard)
			tc.edit(&rc)
			p := mustPredict(t, rc)
			assert.False(t, p.Feasible)
			for _, v := range []int64{p.PeakMemAllocatedBytes, p.PeakMemReservedBytes, p.PeakDeviceMemBytes,
				p.ModelStateBytes, p.HostMemBytes, p.TokensPerStep, p.CommBytesPerStep.AllGather,
				p.CommBytesPerStep.ReduceScatter, p.CommBytesPerStep.AllReduce} {
				assert.GreaterOrEqual(t, v, int64(0))
			}
			for k, v := range p.Breakdown {
				assert.GreaterOrEqual(t, v, int64(0), k)
			}
			assert.GreaterOrEqual(t, p.PeakMemReservedBytes, p.PeakMemAllocatedBytes)

			res, err := New().Run(t.Context(), rc, backends.RunEnv{}, nil)
			require.NoError(t, err)
			assert.Equal(t, results.StatusInfeasible, res.Status)
			if v := res.PeakMemReservedBytes; v != nil {
				assert.Positive(t, *v)
			}
			// What is stored passes the harness's figure check: infeasible, as
			// plan says, not failed on a saturated figure.
			m := results.Checked(rc, results.Normalize(rc, []results.Result{res}))
			assert.Equal(t, results.StatusInfeasible, m.Status, m.Error)
		})
	}

	rc := cfg("tiny", 1, sweeps.FullShard)
	rc.SeqLen = 1_000_000_000
	_, err := Predict(rc)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "seq_len 1000000000 is out of range (0 to 16777216)")
	res, err := New().Run(t.Context(), rc, backends.RunEnv{}, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusInfeasible, res.Status)
	assert.Nil(t, res.PeakMemReservedBytes)

	_, err = shapes.ParseConfig("huge.json", []byte(`{"hidden_size": 9223372036854775807, "num_hidden_layers": 1,
		"num_attention_heads": 1, "intermediate_size": 1, "vocab_size": 1, "max_position_embeddings": 1}`))
	require.Error(t, err)
}
