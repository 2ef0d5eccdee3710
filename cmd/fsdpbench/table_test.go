package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

func TestVaryingAxes(t *testing.T) {
	base := sweeps.RunConfig{Model: "llama3-8b", WorldSize: 8, BatchPerDevice: 1, Sharding: sweeps.FullShard}
	with := func(f func(*sweeps.RunConfig)) sweeps.RunConfig {
		rc := base
		f(&rc)
		rc.AssignID()
		return rc
	}
	tests := []struct {
		name string
		runs []sweeps.RunConfig
		want []string
	}{
		{name: "none", runs: nil, want: nil},
		{name: "one run varies nothing", runs: []sweeps.RunConfig{base}, want: nil},
		{
			name: "in RunConfig order, IDs and launch settings left out",
			runs: []sweeps.RunConfig{
				with(func(rc *sweeps.RunConfig) { rc.Sharding = sweeps.NoShard; rc.Timeout = 5 }),
				with(func(rc *sweeps.RunConfig) { rc.BatchPerDevice = 2; rc.Backend = "other" }),
			},
			want: []string{"batch_per_device", "sharding"},
		},
		{
			name: "booleans and strings",
			runs: []sweeps.RunConfig{
				with(func(rc *sweeps.RunConfig) { rc.ActivationCheckpointing = true }),
				with(func(rc *sweeps.RunConfig) { rc.Model = "tiny" }),
			},
			want: []string{"model", "activation_checkpointing"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := varyingAxes(tt.runs)
			assert.Equal(t, tt.want, got)
			for _, rc := range tt.runs {
				assert.Len(t, axisValues(rc, got), len(got))
			}
		})
	}
	assert.Equal(t, []string{"2", "no_shard", "true"},
		axisValues(with(func(rc *sweeps.RunConfig) {
			rc.BatchPerDevice, rc.Sharding, rc.ActivationCheckpointing = 2, sweeps.NoShard, true
		}), []string{"batch_per_device", "sharding", "activation_checkpointing"}))
}
