package sweeps

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parse(t *testing.T, spec string, sets ...string) *Plan {
	t.Helper()
	plan, err := Parse([]byte(spec), "spec.yaml", Options{Set: sets})
	require.NoError(t, err)
	return plan
}

// point projects a run onto a few axes, for compact expectations.
type point struct {
	Nodes, GPUsPerNode, WorldSize, Batch, GradAccum, GlobalBatch int
}

func pointOf(rc RunConfig) point {
	return point{rc.Nodes, rc.GPUsPerNode, rc.WorldSize, rc.BatchPerDevice, rc.GradAccum, rc.GlobalBatch}
}

func TestDerivedAxes(t *testing.T) {
	tests := []struct {
		name string
		base string
		want point
	}{
		{name: "nothing given: one device", base: "{}", want: point{1, 1, 1, 1, 1, 1}},
		{name: "world_size alone: one node", base: "{world_size: 8}", want: point{1, 8, 8, 1, 1, 8}},
		{name: "gpus_per_node alone: one node", base: "{gpus_per_node: 4}", want: point{1, 4, 4, 1, 1, 4}},
		{name: "nodes and gpus_per_node", base: "{nodes: 2, gpus_per_node: 8}", want: point{2, 8, 16, 1, 1, 16}},
		{name: "nodes and world_size", base: "{nodes: 2, world_size: 16}", want: point{2, 8, 16, 1, 1, 16}},
		{name: "gpus_per_node and world_size", base: "{gpus_per_node: 8, world_size: 32}", want: point{4, 8, 32, 1, 1, 32}},
		{name: "all three consistent", base: "{nodes: 2, gpus_per_node: 4, world_size: 8}", want: point{2, 4, 8, 1, 1, 8}},
		{name: "global batch from batch and grad_accum", base: "{world_size: 4, batch_per_device: 2, grad_accum: 3}", want: point{1, 4, 4, 2, 3, 24}},
		{name: "grad_accum from global batch", base: "{world_size: 4, batch_per_device: 2, global_batch: 64}", want: point{1, 4, 4, 2, 8, 64}},
		{name: "grad_accum from global batch, default batch", base: "{world_size: 8, global_batch: 32}", want: point{1, 8, 8, 1, 4, 32}},
		{name: "batch from global batch and grad_accum", base: "{world_size: 8, grad_accum: 2, global_batch: 64}", want: point{1, 8, 8, 4, 2, 64}},
		{name: "all three batch values consistent", base: "{world_size: 2, batch_per_device: 2, grad_accum: 2, global_batch: 8}", want: point{1, 2, 2, 2, 2, 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := parse(t, "name: x\nbase: "+tt.base+"\n")
			require.Len(t, plan.Runs, 1)
			assert.Equal(t, tt.want, pointOf(plan.Runs[0]))
		})
	}
}

func TestDefaults(t *testing.T) {
	plan := parse(t, "name: defaults\n")
	require.Len(t, plan.Runs, 1)
	rc := plan.Runs[0]
	assert.Equal(t, "defaults", plan.Name)
	assert.Equal(t, "sim", plan.Backend)
	assert.Equal(t, "local", plan.Launcher)
	want := Defaults()
	want.Sweep = "defaults"
	want.Nodes, want.GPUsPerNode, want.WorldSize, want.GlobalBatch = 1, 1, 1, 1
	want.AssignID()
	assert.Equal(t, want, rc)
	assert.Equal(t, Duration(30*time.Minute), rc.Timeout)
	assert.Empty(t, plan.Axes)
	assert.Empty(t, plan.Warnings)
}

func TestSettings(t *testing.T) {
	spec := `name: settings
backend: gotrain
launcher: slurm
hardware: h100-sxm
model: llama-1b
seq_len: 2048
steps: 50
warmup_steps: 5
repeats: 6
timeout: 1h30m
seed: 7
base:
  world_size: 2
  grad_accum: 2
  backward_prefetch: backward_post
  forward_prefetch: true
  cpu_offload: true
  mixed_precision: fp16
  wrap_policy: size:1e8
  compile: true
  activation_checkpointing: true
backend_options: {inter_node_bus_bw_gbps: 3, nested: {a: [1, x]}}
launcher_options: {partition: gpu}
`
	plan := parse(t, spec)
	require.Len(t, plan.Runs, 1)
	rc := plan.Runs[0]
	assert.Equal(t, "gotrain", plan.Backend)
	assert.Equal(t, "slurm", plan.Launcher)
	assert.Equal(t, RunConfig{
		ID: rc.ID, Slug: "ws2-bs1-ga2-full_shard-ac1-post-fwdpf-offload-fp16",
		Sweep: "settings", Backend: "gotrain", Launcher: "slurm", Hardware: "h100-sxm", Model: "llama-1b",
		SeqLen: 2048, Steps: 50, WarmupSteps: 5, Repeats: 6, Timeout: Duration(90 * time.Minute), Seed: 7,
		Nodes: 1, GPUsPerNode: 2, WorldSize: 2, BatchPerDevice: 1, GradAccum: 2, GlobalBatch: 4,
		Sharding: FullShard, ActivationCheckpointing: true, BackwardPrefetch: BackwardPost,
		ForwardPrefetch: true, CPUOffload: true, MixedPrecision: FP16, WrapPolicy: "size:100000000", Compile: true, Checkpoint: CheckpointNone,
		BackendOptions:  map[string]any{"inter_node_bus_bw_gbps": int64(3), "nested": map[string]any{"a": []any{int64(1), "x"}}},
		LauncherOptions: map[string]any{"partition": "gpu"},
	}, rc)
}

func TestSettingsUnderBase(t *testing.T) {
	plan := parse(t, "name: x\nbase: {steps: 7, backend: gotrain, seq_len: 64, timeout: 5m}\n")
	rc := plan.Runs[0]
	assert.Equal(t, "gotrain", plan.Backend)
	assert.Equal(t, [2]int{7, 64}, [2]int{rc.Steps, rc.SeqLen})
	assert.Equal(t, Duration(5*time.Minute), rc.Timeout)
}

func TestExpansionOrder(t *testing.T) {
	spec := `name: order
grid:
  sharding: [no_shard, full_shard]
  world_size: [4, 1, 2]
include:
  - {sharding: ddp, world_size: 2}
`
	plan := parse(t, spec)
	var got []string
	for _, rc := range plan.Runs {
		got = append(got, fmt.Sprintf("%s/%d", rc.Sharding, rc.WorldSize))
	}
	// Axes in the order written, last fastest, values in the order listed; includes last.
	assert.Equal(t, []string{"no_shard/4", "no_shard/1", "no_shard/2", "full_shard/4", "full_shard/1", "full_shard/2", "ddp/2"}, got)
	assert.Equal(t, []string{"sharding", "world_size", "gpus_per_node", "global_batch"}, plan.Axes)
}

func TestExcludeAndInclude(t *testing.T) {
	spec := `name: strategies
base:
  mixed_precision: fp32
grid:
  world_size: [1, 2, 4]
  batch_per_device: [1, 2]
  sharding: [full_shard, shard_grad_op, no_shard]
  activation_checkpointing: [false, true]
  backward_prefetch: [backward_pre, none]
exclude:
  - {sharding: no_shard, activation_checkpointing: true}
  - {world_size: 4, sharding: [full_shard, shard_grad_op], backward_prefetch: none}
  - {global_batch: 8}            # a derived value: world_size 4 × batch 2
include:
  - {sharding: ddp, world_size: 2, batch_per_device: 1}
  - {sharding: full_shard, world_size: 1, batch_per_device: 1, activation_checkpointing: false, backward_prefetch: backward_pre}
`
	plan := parse(t, spec)
	count := func(pred func(RunConfig) bool) int {
		n := 0
		for _, rc := range plan.Runs {
			if pred(rc) {
				n++
			}
		}
		return n
	}
	// 72 grid points. Entry 1 drops no_shard × ac (3 ws × 2 bs × 2 prefetch = 12);
	// entry 2 drops ws4 × {full_shard, shard_grad_op} × none (2 bs × 2 × 2 ac = 8);
	// entry 3 drops the rest of ws4 × bs2 (12 points, 2 + 4 of them already gone = 6).
	// The ddp include adds one; the second include is the first grid point.
	assert.Len(t, plan.Runs, 3*2*3*2*2-12-8-6+1)
	assert.Zero(t, count(func(rc RunConfig) bool { return rc.Sharding == NoShard && rc.ActivationCheckpointing }))
	assert.Zero(t, count(func(rc RunConfig) bool { return rc.GlobalBatch == 8 }))
	assert.Equal(t, 1, count(func(rc RunConfig) bool { return rc.Sharding == DDP }))
	// Include entries are merged over base: fp32 from base, defaults elsewhere.
	last := plan.Runs[len(plan.Runs)-1]
	assert.Equal(t, DDP, last.Sharding)
	assert.Equal(t, FP32, last.MixedPrecision)
	assert.Equal(t, BackwardPre, last.BackwardPrefetch)
	// The second include repeats the first grid point: merged, and said so.
	assert.Equal(t, "ws1-bs1-full_shard-ac0-pre-fp32", plan.Runs[0].Slug)
	require.Len(t, plan.Warnings, 1)
	assert.Contains(t, plan.Warnings[0], "spec.yaml:16:5: this include entry gives the same run as an earlier point")
	ids := map[string]bool{}
	for _, rc := range plan.Runs {
		assert.False(t, ids[rc.ID], "duplicate ID %s", rc.ID)
		ids[rc.ID] = true
	}
}

func TestExcludeThatMatchesNothingWarns(t *testing.T) {
	plan := parse(t, "name: x\ngrid:\n  sharding: [ddp, no_shard]\nexclude:\n  - {sharding: full_shard}\n")
	assert.Len(t, plan.Runs, 2)
	assert.Equal(t, []string{"spec.yaml:5:5: this exclude entry matches no grid point; check its values"}, plan.Warnings)
}

func TestExcludeRemovesInvalidCombinations(t *testing.T) {
	// Without the exclude, hybrid_shard × nodes 1 and world_size 12 on 8-GPU nodes
	// are errors; with it, the sweep is fine.
	spec := `name: x
base: {gpus_per_node: 8}
grid:
  nodes: [1, 2]
  sharding: [full_shard, hybrid_shard]
exclude:
  - {sharding: hybrid_shard, nodes: 1}
`
	plan := parse(t, spec)
	require.Len(t, plan.Runs, 3)
	assert.Equal(t, []point{{1, 8, 8, 1, 1, 8}, {2, 8, 16, 1, 1, 16}, {2, 8, 16, 1, 1, 16}},
		[]point{pointOf(plan.Runs[0]), pointOf(plan.Runs[1]), pointOf(plan.Runs[2])})
	assert.Equal(t, HybridShard, plan.Runs[2].Sharding)

	spec = "name: x\nbase: {gpus_per_node: 8}\ngrid:\n  world_size: [8, 12, 16]\nexclude:\n  - {world_size: 12}\n"
	plan = parse(t, spec)
	assert.Len(t, plan.Runs, 2)
}

func TestSearch(t *testing.T) {
	spec := `name: search
base: {world_size: 8, grad_accum: 2}
grid:
  batch_per_device: [4, 2, 8]
  activation_checkpointing: [false, true]
search:
  batch_per_device: max_fit
`
	plan := parse(t, spec)
	assert.Equal(t, "batch_per_device", plan.Search)
	require.Len(t, plan.Runs, 2, "one search per point of the other axes")
	groups := map[string]bool{}
	for _, rc := range plan.Runs {
		assert.Equal(t, "batch_per_device", rc.Search)
		assert.Equal(t, 2, rc.BatchPerDevice, "starts at the smallest value")
		assert.Equal(t, 8*2*2, rc.GlobalBatch)
		groups[rc.SearchGroup] = true
	}
	assert.Len(t, groups, 2)
	assert.Equal(t, "ws8-ga2-full_shard-ac0-pre-", plan.Runs[0].SearchGroup[:len(plan.Runs[0].SearchGroup)-8])

	// Doubling keeps the group, re-derives the global batch and gets a new ID.
	rc := plan.Runs[0]
	next, ok := NextSearchPoint(rc)
	require.True(t, ok)
	assert.Equal(t, 4, next.BatchPerDevice)
	assert.Equal(t, 8*4*2, next.GlobalBatch)
	assert.Equal(t, rc.SearchGroup, next.SearchGroup)
	assert.NotEqual(t, rc.ID, next.ID)
	check := next
	check.AssignID()
	assert.Equal(t, check.ID, next.ID)

	// Without search the same grid has 6 points.
	plan = parse(t, spec[:len(spec)-len("search:\n  batch_per_device: max_fit\n")])
	assert.Len(t, plan.Runs, 6)
	assert.Empty(t, plan.Runs[0].SearchGroup)
}

func TestNextSearchPointCap(t *testing.T) {
	rc := RunConfig{Search: "batch_per_device", WorldSize: 1, BatchPerDevice: 1, GradAccum: 1, SearchGroup: "g"}
	var tried []int
	for {
		tried = append(tried, rc.BatchPerDevice)
		next, ok := NextSearchPoint(rc)
		if !ok {
			break
		}
		rc = next
	}
	assert.Equal(t, MaxSearchBatch, tried[len(tried)-1])
	assert.Len(t, tried, 17) // 1, 2, 4, ..., 65536

	_, ok := NextSearchPoint(RunConfig{BatchPerDevice: 1})
	assert.False(t, ok, "not a search point")
}

func TestResolvedParsesToTheSameRuns(t *testing.T) {
	spec := `name: resolved
model: gpt2-124m
base: &b
  mixed_precision: fp32
grid:
  world_size: [1, 2]
  sharding: [full_shard, "no_shard"]
exclude:
  - {sharding: no_shard, world_size: 2}
include:
  - <<: *b
    sharding: ddp
backend_options: {a: "1", "y": true, list: [1, 2.5]}
`
	sets := []string{"seq_len=256", "activation_checkpointing=false,true", "backend_options.b=x"}
	plan := parse(t, spec, sets...)
	again, err := Parse(plan.Resolved, "sweep.yaml", Options{})
	require.NoError(t, err, "resolved:\n%s", plan.Resolved)
	assert.Equal(t, plan.Runs, again.Runs)
	body := func(b []byte) string { return string(b[bytes.IndexByte(b, '\n'):]) }
	assert.Equal(t, body(plan.Resolved), body(again.Resolved), "resolving is idempotent")
	assert.Contains(t, string(plan.Resolved), `with --set "seq_len=256"`)
	assert.Contains(t, string(plan.Resolved), "timeout: 30m\n", "defaults are written out")
}

func TestDeterminism(t *testing.T) {
	spec := `name: det
grid:
  model: [tiny, gpt2-124m]
  world_size: [1, 2, 4, 8]
  sharding: [full_shard, shard_grad_op, no_shard, ddp]
  activation_checkpointing: [false, true]
  seed: [0, 1]
include:
  - {sharding: ddp, world_size: 16}
`
	first := parse(t, spec)
	for range 3 {
		again := parse(t, spec)
		assert.Equal(t, first.Runs, again.Runs)
		assert.Equal(t, first.Resolved, again.Resolved)
	}
	assert.Len(t, first.Runs, 2*4*4*2*2+1)
}

func TestIncludeWithoutGrid(t *testing.T) {
	spec := `name: only-includes
base: {gpus_per_node: 8, sharding: hybrid_shard}
include:
  - {nodes: 1, sharding: full_shard}
  - {nodes: 2}
`
	plan := parse(t, spec)
	require.Len(t, plan.Runs, 2, "the include entries are the runs; the base point alone would be invalid")
	assert.Equal(t, "ws8-bs1-full_shard-ac0-pre", plan.Runs[0].Slug)
	assert.Equal(t, "ws16-n2-bs1-hybrid_shard-ac0-pre", plan.Runs[1].Slug)
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	spec := `name: anchors
base: &common
  world_size: 8
  mixed_precision: fp32
include:
  - <<: *common
    sharding: ddp
  - *common
`
	plan := parse(t, spec)
	require.Len(t, plan.Runs, 2)
	assert.Equal(t, FP32, plan.Runs[0].MixedPrecision)
	assert.Equal(t, DDP, plan.Runs[0].Sharding)
	assert.Equal(t, 8, plan.Runs[0].WorldSize)
	assert.Equal(t, FullShard, plan.Runs[1].Sharding, "an alias of base is the base point")
}
