package sweeps

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExamples loads every spec in examples/: they are what the README tells users
// to run first, so each must parse and answer the question its header states.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("examples", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			assert.True(t, bytes.HasPrefix(data, []byte("# Question: ")), "begins with the question it answers")
			assert.Contains(t, string(data), "# Run:    fsdpbench sweep sweeps/"+filepath.ToSlash(f), "says how to run it")
			plan, err := Load(f, Options{
				CheckModel:    exampleModel(knownOnly("tiny", "gpt2-124m", "llama-1b", "llama3-8b", "mistral-7b", "codellama-7b")),
				CheckHardware: knownOnly("h100-sxm", "h100-pcie", "h200", "a100-80g", "cpu"),
				CheckBackend:  knownOnly("sim", "gotrain", "torchrun"),
			})
			require.NoError(t, err)
			assert.Equal(t, strings.TrimSuffix(filepath.Base(f), ".yaml"), plan.Name, "named after its file")
			assert.Contains(t, []string{"sim", "gotrain", "torchrun"}, plan.Backend)
			if plan.Backend == "torchrun" {
				for _, rc := range plan.Runs {
					assert.Equal(t, "cpu", rc.Hardware, "runs without a GPU")
				}
			}
			assert.Empty(t, plan.Warnings)
			assert.NotEmpty(t, plan.Runs)
		})
	}
}

// exampleModel accepts, besides what known accepts, a config.json under
// examples/models/ that exists (the spec names it relative to itself; the check
// gets it resolved).
func exampleModel(known func(string) error) func(string) error {
	return func(m string) error {
		if filepath.IsAbs(m) && strings.HasSuffix(filepath.ToSlash(m), "/config.json") && strings.Contains(filepath.ToSlash(m), "/sweeps/examples/models/") {
			_, err := os.Stat(m)
			return err
		}
		return known(m)
	}
}

// TestExampleContents pins what each example compares.
func TestExampleContents(t *testing.T) {
	load := func(name string) *Plan {
		plan, err := Load(filepath.Join("examples", name), Options{})
		require.NoError(t, err)
		return plan
	}
	summary := func(p *Plan) []string {
		var out []string
		for _, rc := range p.Runs {
			out = append(out, rc.Slug)
		}
		return out
	}

	p := load("llama1b-strategies-8xh100.yaml")
	assert.Equal(t, []string{
		"ws8-bs4-full_shard-ac0-pre", "ws8-bs4-full_shard-ac1-pre",
		"ws8-bs4-shard_grad_op-ac0-pre", "ws8-bs4-shard_grad_op-ac1-pre",
		"ws8-bs4-no_shard-ac0-pre", "ws8-bs4-no_shard-ac1-pre",
		"ws8-bs4-ddp-ac0-pre", "ws8-bs4-ddp-ac1-pre",
	}, summary(p))
	for _, rc := range p.Runs {
		assert.Equal(t, [3]string{"llama-1b", "h100-sxm", BF16}, [3]string{rc.Model, rc.Hardware, rc.MixedPrecision})
		assert.Equal(t, 2048, rc.SeqLen)
	}

	p = load("mistral7b-1node-vs-2nodes.yaml")
	assert.Equal(t, []string{"ws8-bs1-full_shard-ac0-pre", "ws16-n2-bs1-full_shard-ac0-pre", "ws16-n2-bs1-hybrid_shard-ac0-pre"}, summary(p))
	assert.Equal(t, map[string]any{"inter_node_bus_bw_gbps": int64(3)}, p.Runs[0].BackendOptions)

	p = load("batch-search-checkpointing.yaml")
	assert.Equal(t, "batch_per_device", p.Search)
	assert.Equal(t, []string{"ws8-bs1-full_shard-ac0-pre", "ws8-bs1-full_shard-ac1-pre"}, summary(p))
	assert.Equal(t, 4096, p.Runs[0].SeqLen)

	p = load("gpt2-ddp-vs-fsdp-memory.yaml")
	assert.Len(t, p.Runs, 4*4)
	assert.Equal(t, []string{"world_size", "sharding", "gpus_per_node", "global_batch"}, p.Axes)

	for _, name := range []string{"cpu-engines-h256.yaml", "cpu-engines-h512.yaml"} {
		p = load(name)
		assert.Equal(t, []string{"ws1-bs4-ddp-ac0-pre-fp32", "ws2-bs4-ddp-ac0-pre-fp32"}, summary(p), name)
		assert.Equal(t, "cpu", p.Runs[0].Hardware, "%s: runs on both engines without a GPU", name)
	}

	p = load("quickstart.yaml")
	assert.LessOrEqual(t, len(p.Runs), 12, "the first command stays small")
}

// TestEnvExamples pins the env and option axis examples (issue 30): one table
// of backend_options.transport × env.OMP_NUM_THREADS, and the GPU example's
// allocator settings.
func TestEnvExamples(t *testing.T) {
	p, err := Load(filepath.Join("examples", "gotrain-transport-threads.yaml"), Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"backend_options.transport", "env.OMP_NUM_THREADS"}, p.Axes)
	var got []string
	for _, rc := range p.Runs {
		assert.Equal(t, 2, rc.WorldSize)
		got = append(got, rc.BackendOptions["transport"].(string)+"/"+rc.Env["OMP_NUM_THREADS"])
	}
	assert.Equal(t, []string{"shm/1", "shm/2", "tcp/1", "tcp/2"}, got)

	p, err = Load(filepath.Join("..", "examples", "gpu", "torchrun-alloc-conf-1xh100.yaml"), Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"env.PYTORCH_CUDA_ALLOC_CONF", "activation_checkpointing"}, p.Axes)
	assert.Equal(t, "expandable_segments:True", p.Runs[2].Env["PYTORCH_CUDA_ALLOC_CONF"])
}
