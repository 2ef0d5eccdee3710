package fsdp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// resumeTol is the largest relative loss difference accepted when a checkpoint
// resumes at the layout that wrote it: the same arithmetic in the same order.
const resumeTol = 1e-6

// withTrainers builds a trainer per rank of a ws-rank world and runs f on each,
// concurrently; it returns f's errors by rank.
func withTrainers(t *testing.T, ws int, cfg Config, f func(r int, tr *Trainer) error) []error {
	t.Helper()
	world := newWorld(t, ws)
	return eachRank(ws, func(r int) error {
		tr, err := New(context.Background(), cpu.New(cpu.Options{}), world[r], cfg)
		if err != nil {
			return err
		}
		defer tr.Close()
		return f(r, tr)
	})
}

// stepLosses runs n steps and returns their losses and step numbers.
func stepLosses(ctx context.Context, tr *Trainer, n int) ([]float64, []int, error) {
	var losses []float64
	var nums []int
	for range n {
		rep, err := tr.Step(ctx)
		if err != nil {
			return nil, nil, err
		}
		losses, nums = append(losses, rep.Loss), append(nums, rep.Step)
	}
	return losses, nums, nil
}

// layoutConfig is baseConfig at the global batch for ws ranks of sharding.
func layoutConfig(t *testing.T, ws int, sharding string, gpusPerNode int) Config {
	cfg := baseConfig(t)
	cfg.Sharding, cfg.GPUsPerNode, cfg.BatchPerDevice = sharding, gpusPerNode, globalBatch/ws
	return cfg
}

// TestCheckpointResume trains 3 steps at world size 2 under full_shard, saves
// both kinds, trains 2 more, and checks that fresh trainers that load either
// checkpoint train those 2 steps to the same losses, the full one at other world
// sizes and strategies too.
func TestCheckpointResume(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sharded, full := filepath.Join(dir, "sharded"), filepath.Join(dir, "full")
	cfg := layoutConfig(t, 2, sweeps.FullShard, 0)
	want := make([][]float64, 2)
	errs := withTrainers(t, 2, cfg, func(r int, tr *Trainer) error {
		if _, _, err := stepLosses(ctx, tr, 3); err != nil {
			return err
		}
		if err := tr.SaveSharded(ctx, sharded); err != nil {
			return err
		}
		if err := tr.SaveFull(ctx, full); err != nil {
			return err
		}
		var err error
		want[r], _, err = stepLosses(ctx, tr, 2)
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.NotEqual(t, want[0][0], want[0][1], "the two steps after the save must differ for the test to mean anything")
	for _, name := range []string{MetaFile, FullFile} {
		assert.FileExists(t, filepath.Join(full, name))
	}
	leftovers, err := filepath.Glob(filepath.Join(dir, "*", ".*tmp*"))
	require.NoError(t, err)
	assert.Empty(t, leftovers, "atomic writes must leave no temporary files")

	cases := []struct {
		name     string
		ws       int
		sharding string
		gpn      int
		full     bool
		tol      float64
	}{
		{"sharded-ws2-full_shard", 2, sweeps.FullShard, 0, false, resumeTol},
		{"full-ws2-full_shard", 2, sweeps.FullShard, 0, true, resumeTol},
		{"full-ws1-no_shard", 1, sweeps.NoShard, 0, true, parityTol},
		{"full-ws4-hybrid_shard", 4, sweeps.HybridShard, 2, true, parityTol},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := make([][]float64, c.ws)
			nums := make([][]int, c.ws)
			errs := withTrainers(t, c.ws, layoutConfig(t, c.ws, c.sharding, c.gpn), func(r int, tr *Trainer) error {
				var err error
				if c.full {
					err = tr.LoadFull(ctx, full)
				} else {
					err = tr.LoadSharded(ctx, sharded)
				}
				if err != nil {
					return err
				}
				got[r], nums[r], err = stepLosses(ctx, tr, 2)
				return err
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for r := range c.ws {
				assert.Equal(t, []int{4, 5}, nums[r], "rank %d must resume at step 4", r)
				requireRelClose(t, want[0], got[r], c.tol, fmt.Sprintf("rank %d", r))
			}
		})
	}
}

// TestCheckpointRefused checks that a checkpoint that does not fit the run is
// refused on every rank with an error that says what differs.
func TestCheckpointRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sharded, full := filepath.Join(dir, "sharded"), filepath.Join(dir, "full")
	errs := withTrainers(t, 2, layoutConfig(t, 2, sweeps.FullShard, 0), func(r int, tr *Trainer) error {
		if _, _, err := stepLosses(ctx, tr, 1); err != nil {
			return err
		}
		if err := tr.SaveSharded(ctx, sharded); err != nil {
			return err
		}
		return tr.SaveFull(ctx, full)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	fewerLayers := func(c *Config) { c.Shape.Layers-- }
	cases := []struct {
		name     string
		ws       int
		sharding string
		edit     func(*Config)
		full     bool
		dir      string
		want     string
	}{
		{"sharded at another world size", 4, sweeps.FullShard, nil, false, sharded, "world size 2 (this run 4)"},
		{"sharded under another strategy", 2, sweeps.ShardGradOp, nil, false, sharded, "sharding full_shard (this run shard_grad_op)"},
		{"sharded into another model", 2, sweeps.FullShard, fewerLayers, false, sharded, "unit layout"},
		{"full into another model", 1, sweeps.NoShard, fewerLayers, true, full, "another model"},
		{"full with another seed", 1, sweeps.NoShard, func(c *Config) { c.Seed++ }, true, full, "seed"},
		{"full as sharded", 2, sweeps.FullShard, nil, false, full, "not a sharded one"},
		{"missing", 2, sweeps.FullShard, nil, true, filepath.Join(dir, "none"), "complete checkpoint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := layoutConfig(t, c.ws, c.sharding, 0)
			if c.edit != nil {
				c.edit(&cfg)
			}
			steps := make([]int, c.ws)
			errs := withTrainers(t, c.ws, cfg, func(r int, tr *Trainer) error {
				var err error
				if c.full {
					err = tr.LoadFull(ctx, c.dir)
				} else {
					err = tr.LoadSharded(ctx, c.dir)
				}
				steps[r] = tr.step
				return err
			})
			for r, err := range errs {
				require.Error(t, err, "rank %d must refuse", r)
				assert.Zero(t, steps[r], "rank %d: a refused load must leave the trainer as it was", r)
			}
			assert.ErrorContains(t, errs[0], c.want)
		})
	}
}

// TestCheckpointDamagedShard checks that a truncated shard file is refused.
func TestCheckpointDamagedShard(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := layoutConfig(t, 1, sweeps.FullShard, 0)
	errs := withTrainers(t, 1, cfg, func(_ int, tr *Trainer) error { return tr.SaveSharded(ctx, dir) })
	require.NoError(t, errs[0])
	path := shardPath(dir, 0)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, st.Size()-4))
	errs = withTrainers(t, 1, cfg, func(_ int, tr *Trainer) error { return tr.LoadSharded(ctx, dir) })
	require.ErrorContains(t, errs[0], "truncated")
}
