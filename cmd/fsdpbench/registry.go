package main

import (
	"fmt"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain"
	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/backends/torchrun"
	"github.com/fsdpbench/fsdpbench/plugins"
)

// newRegistry builds the one registry every command uses: the built-in backends,
// then the plugins found on the plugin path (a plugin named like a built-in one is
// ignored). New built-in backends are registered here.
func newRegistry() (*backends.Registry, error) {
	reg := &backends.Registry{}
	builtin := map[string]bool{}
	for _, b := range []backends.Backend{sim.New(), gotrain.New(), torchrun.New()} {
		if err := reg.Register(b); err != nil {
			return nil, fmt.Errorf("registering built-in backends: %w", err)
		}
		builtin[b.Name()] = true
	}
	for _, p := range plugins.Load(plugins.SearchPath(), plugins.LockPath(), func(name string) bool { return builtin[name] }, plugins.Options{}) {
		if err := reg.Register(p); err != nil {
			return nil, fmt.Errorf("registering plugin %s: %w", p.Path(), err)
		}
	}
	return reg, nil
}
