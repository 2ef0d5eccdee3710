package sweeps

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// streamSpecs are specs that reach every part of expansion a streamed plan
// makes again: excludes, includes (merged into a grid point, and new), env and
// option axes, derived axes and nodes split by the hardware's size, model
// files resolved against the spec's folder, a search (held as usual).
var streamSpecs = map[string]string{
	"grid": `name: g
hardware: h100-sxm
grid:
  model: [tiny, llama-1b]
  world_size: [1, 8, 16]
  batch_per_device: [1, 2]
  seed: [0, 1, 2]
  sharding: [full_shard, ddp]
exclude:
  - {model: llama-1b, sharding: ddp}
  - {world_size: 1, seed: 2}
include:
  - {model: tiny, world_size: 1, batch_per_device: 1, seed: 0, sharding: ddp}
  - {model: tiny, world_size: 2, batch_per_device: 4, seed: 9}
`,
	"env and options": `name: e
grid:
  env.NCCL_IB_DISABLE: ["0", "1"]
  backend_options.efficiency: [0.3, 0.5]
  grad_accum: [1, 2]
  global_batch: [8]
env: {OTHER: x}
backend_options: {inter_node_bus_bw_gbps: 3}
include:
  - {env.NCCL_IB_DISABLE: "1", backend_options.efficiency: 0.7, grad_accum: 4, global_batch: 8}
`,
	"model file": `name: m
grid:
  model: [models/m.json, tiny]
  checkpoint: [none, sharded]
  checkpoint_every: [5]
`,
	"large grid": largeGrid(),
	"one point": `name: one
base: {seed: 3}
`,
	"search": `name: s
search: {batch_per_device: max_fit}
grid:
  batch_per_device: [1, 2, 4]
  seed: [0, 1]
`,
}

// largeGrid is a spec of 3,000 points with an exclude and an include: enough
// for a pass of All to make its runs on a goroutine of its own.
func largeGrid() string {
	var b strings.Builder
	b.WriteString("name: large\ngrid:\n  batch_per_device: [1, 2, 3]\n  seed: [")
	for i := range 1000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(i))
	}
	b.WriteString("]\nexclude:\n  - {batch_per_device: 2, seed: 7}\ninclude:\n  - {batch_per_device: 9}\n")
	return b.String()
}

// TestStreamedPlanIsTheHeldPlan: a streamed plan (Options.Stream) yields from
// All the runs, in the order, that Parse holds in Runs without it, on every
// pass and from several goroutines at once, and says the same about them
// (axes, warnings, notes, resolved spec, option positions).
func TestStreamedPlanIsTheHeldPlan(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "models"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "models", "m.json"), []byte(`{"hidden_size": 64}`), 0o644))
	examples, err := filepath.Glob(filepath.Join("examples", "*.yaml"))
	require.NoError(t, err)
	paths := map[string]string{}
	for name, body := range streamSpecs {
		p := filepath.Join(dir, name+".yaml")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		paths[name] = p
	}
	for _, e := range examples {
		paths[filepath.Base(e)] = e
	}
	opts := Options{GPUsPerNode: func(hw string) int {
		if hw == "h100-sxm" {
			return 8
		}
		return 0
	}, PathOptions: []string{"backend_options.script"}}
	for name, p := range paths {
		t.Run(name, func(t *testing.T) {
			held, err := Load(p, opts)
			require.NoError(t, err)
			so := opts
			so.Stream = true
			streamed, err := Load(p, so)
			require.NoError(t, err)
			assert.Equal(t, held.Search != "", !streamed.Streamed() && streamed.Runs != nil, "only a search is held")
			assert.Equal(t, len(held.Runs), streamed.Len())
			assert.Equal(t, len(held.Runs), held.Len())
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					assert.Equal(t, held.Runs, slices.Collect(streamed.All()))
				})
			}
			wg.Wait()
			assert.Equal(t, held.Runs, slices.Collect(held.All()))
			held.Runs, streamed.Runs = nil, nil
			held.stream, streamed.stream = nil, nil
			assert.Equal(t, held, streamed)
		})
	}
}

// TestStreamedPlanStopsWhenAsked: a pass of All ends when its loop does, a
// large grid's (made on a goroutine of its own) too.
func TestStreamedPlanStopsWhenAsked(t *testing.T) {
	for _, spec := range []string{streamSpecs["grid"], largeGrid()} {
		plan, err := Parse([]byte(spec), "s.yaml", Options{Stream: true})
		require.NoError(t, err)
		for _, stop := range []int{1, 5, 600, 2999} {
			n := 0
			for range plan.All() {
				n++
				if n == stop {
					break
				}
			}
			assert.Equal(t, min(stop, plan.Len()), n)
		}
	}
}
