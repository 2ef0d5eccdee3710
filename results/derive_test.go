package results

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// run builds a stored run with the given throughput and peak memory.
func run(rc sweeps.RunConfig, status Status, tpsPerRank float64, reserved, allocated *int64) Run {
	rc.AssignID()
	m := Metrics{RunID: rc.ID, Status: status, PeakMemReservedBytes: reserved, PeakMemAllocatedBytes: allocated}
	if tpsPerRank > 0 {
		m.TokensPerSPerRank = F64(tpsPerRank)
	}
	return Run{Config: rc, Metrics: m}
}

func withWS(rc sweeps.RunConfig, ws, gradAccum, globalBatch int) sweeps.RunConfig {
	rc.WorldSize, rc.GPUsPerNode, rc.GradAccum, rc.GlobalBatch = ws, ws, gradAccum, globalBatch
	return rc
}

func TestDeriveScalingEfficiency(t *testing.T) {
	base := fixtureConfig(1, sweeps.FullShard)
	tests := []struct {
		name string
		runs []Run
		want []*float64 // per run
	}{
		{
			name: "weak scaling: same grad_accum, growing global batch",
			runs: []Run{
				run(withWS(base, 1, 1, 2), StatusOK, 1000, nil, nil),
				run(withWS(base, 2, 1, 4), StatusOK, 900, nil, nil),
				run(withWS(base, 4, 1, 8), StatusOK, 800, nil, nil),
			},
			want: []*float64{F64(1), F64(900.0 / 1000), F64(800.0 / 1000)},
		},
		{
			name: "strong scaling: same global batch, grad_accum shrinks",
			runs: []Run{
				run(withWS(base, 1, 8, 16), StatusOK, 1000, nil, nil),
				run(withWS(base, 4, 2, 16), StatusOK, 700, nil, nil),
			},
			want: []*float64{F64(1), F64(700.0 / 1000)},
		},
		{
			name: "grad_accum as an axis: each compares with its own grad_accum",
			runs: []Run{
				run(withWS(base, 1, 1, 2), StatusOK, 1000, nil, nil),
				run(withWS(base, 1, 4, 8), StatusOK, 1200, nil, nil),
				run(withWS(base, 2, 4, 16), StatusOK, 1100, nil, nil),
			},
			want: []*float64{F64(1), F64(1), F64(1100.0 / 1200)},
		},
		{
			name: "baseline out of memory: no efficiency",
			runs: []Run{
				run(withWS(base, 1, 1, 2), StatusOOM, 0, nil, nil),
				run(withWS(base, 2, 1, 4), StatusOK, 900, nil, nil),
			},
			want: []*float64{nil, nil},
		},
		{
			name: "the run itself failed: no efficiency",
			runs: []Run{
				run(withWS(base, 1, 1, 2), StatusOK, 1000, nil, nil),
				run(withWS(base, 2, 1, 4), StatusFailed, 900, nil, nil),
			},
			want: []*float64{F64(1), nil},
		},
		{
			// Each alone at its world size: nothing scaled, no efficiency (not 100%).
			name: "another axis differs: its own group, of one world size",
			runs: []Run{
				run(withWS(base, 1, 1, 2), StatusOK, 1000, nil, nil),
				func() Run {
					rc := withWS(base, 2, 1, 4)
					rc.ActivationCheckpointing = true
					return run(rc, StatusOK, 900, nil, nil)
				}(),
			},
			want: []*float64{nil, nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Derive(tt.runs)
			for i, w := range tt.want {
				got := tt.runs[i].Derived.ScalingEfficiency
				if w == nil {
					assert.Nil(t, got, "run %d", i)
					continue
				}
				require.NotNil(t, got, "run %d", i)
				assert.InDelta(t, *w, *got, 1e-12, "run %d", i)
				assert.NotEmpty(t, tt.runs[i].Derived.ScalingBaseline)
			}
		})
	}
}

func TestDeriveMemorySaving(t *testing.T) {
	at := func(sharding string) sweeps.RunConfig { return fixtureConfig(4, sharding) }
	tests := []struct {
		name   string
		runs   []Run
		want   []*float64
		wantOf string
	}{
		{
			name: "reserved against no_shard",
			runs: []Run{
				run(at(sweeps.NoShard), StatusOK, 1, I64(20<<30), I64(18<<30)),
				run(at(sweeps.FullShard), StatusOK, 1, I64(5<<30), I64(4<<30)),
				run(at(sweeps.DDP), StatusOK, 1, I64(21<<30), I64(19<<30)),
			},
			want:   []*float64{F64(0), F64(1 - 5.0/20), F64(1 - 21.0/20)},
			wantOf: SamplePeakReserved,
		},
		{
			name: "allocated when reserved is missing; ddp when there is no no_shard",
			runs: []Run{
				run(at(sweeps.DDP), StatusOK, 1, nil, I64(16<<30)),
				run(at(sweeps.ShardGradOp), StatusOK, 1, I64(9<<30), I64(8<<30)),
			},
			want:   []*float64{F64(0), F64(1 - 8.0/16)},
			wantOf: SamplePeakAllocated,
		},
		{
			name: "baseline out of memory",
			runs: []Run{
				run(at(sweeps.NoShard), StatusOOM, 0, I64(80<<30), nil),
				run(at(sweeps.FullShard), StatusOK, 1, I64(5<<30), nil),
			},
			want: []*float64{nil, nil},
		},
		{
			name: "no baseline at the same point",
			runs: []Run{
				run(fixtureConfig(2, sweeps.NoShard), StatusOK, 1, I64(20<<30), nil),
				run(at(sweeps.FullShard), StatusOK, 1, I64(5<<30), nil),
			},
			want:   []*float64{F64(0), nil},
			wantOf: SamplePeakReserved,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Derive(tt.runs)
			for i, w := range tt.want {
				d := tt.runs[i].Derived
				if w == nil {
					assert.Nil(t, d.MemorySaving, "run %d", i)
					continue
				}
				require.NotNil(t, d.MemorySaving, "run %d", i)
				assert.InDelta(t, *w, *d.MemorySaving, 1e-12, "run %d", i)
				assert.Equal(t, tt.wantOf, d.MemorySavingOf)
			}
		})
	}
}

func TestFixtureDerived(t *testing.T) {
	runs := fixtureRuns()
	byID := map[string]Run{}
	for _, r := range runs {
		byID[r.Config.ID] = r
	}
	fs1, fs4 := byID[fixtureConfig(1, sweeps.FullShard).ID], byID[fixtureConfig(4, sweeps.FullShard).ID]
	ns4 := byID[fixtureConfig(4, sweeps.NoShard).ID]
	require.NotNil(t, fs4.Derived.ScalingEfficiency)
	assert.InDelta(t, *fs4.Metrics.TokensPerSPerRank / *fs1.Metrics.TokensPerSPerRank, *fs4.Derived.ScalingEfficiency, 1e-12)
	assert.Equal(t, fs1.Config.ID, fs4.Derived.ScalingBaseline)
	assert.Equal(t, StatusOOM, ns4.Metrics.Status)
	assert.Nil(t, fs4.Derived.MemorySaving, "the no_shard baseline ran out of memory")
	assert.Nil(t, ns4.Derived.ScalingEfficiency)
}
