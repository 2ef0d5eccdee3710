package main

import (
	"fmt"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain"
	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/backends/torchrun"
)

// newRegistry builds the one registry every command uses: the built-in backends.
// New backends are registered here.
func newRegistry() (*backends.Registry, error) {
	reg := &backends.Registry{}
	for _, b := range []backends.Backend{sim.New(), gotrain.New(), torchrun.New()} {
		if err := reg.Register(b); err != nil {
			return nil, fmt.Errorf("registering built-in backends: %w", err)
		}
	}
	return reg, nil
}
