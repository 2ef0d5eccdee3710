// Package sdk is what a plugin author needs to ship a backend as a separate binary:
// name the binary fsdpbench-backend-<name>, implement backends.Backend, and call
// Serve from main:
//
//	func main() { sdk.Serve(mybackend.New()) }
//
// fsdpbench starts the binary for each call (Describe, Validate, one Run) and kills
// it, and every process it started, when the call ends; Run's ctx is cancelled when
// the run is cancelled or times out, and the backend must then stop its processes
// within a few seconds. What the backend writes to RunEnv.Stdout and Stderr, and what
// it logs through Logger, lands in the run's stdout.log and stderr.log.
// plugintest checks a built binary against this contract.
package sdk

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"golang.org/x/sys/unix"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/plugins/protocol"
)

// stderr is the process's real standard error, taken before Serve points os.Stderr
// at the host's stdio stream: go-plugin reads hclog's JSON lines from the real one
// and hands them to the host's logger with their level.
var stderr = os.Stderr

// Logger returns a logger whose lines reach the host through hclog: during a Run
// they go to the run's stderr.log (at info and above unless the user sets
// FSDPBENCH_PLUGIN_LOG_LEVEL), otherwise to fsdpbench's stderr (warnings and errors).
func Logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: stderr, JSONFormat: true, Level: hclog.Trace})
}

// Serve serves b to fsdpbench and returns when fsdpbench is done with the process.
// Run by hand, the binary says it is a plugin and exits 1.
//
// The process keeps what it starts within reach: it is a child subreaper, so a
// process the backend starts that daemonizes (double fork, setsid) stays its
// descendant, where fsdpbench finds and kills it when the call ends (fsdpbench
// also runs the plugin under a run reaper of its own, which takes such processes
// over when the plugin exits and ends them before the call returns); and on
// SIGTERM, which fsdpbench arranges for its plugins to get if it dies, it kills
// every descendant and exits.
func Serve(b backends.Backend) {
	keepDescendants()
	logger := Logger()
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: protocol.Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{
			protocol.Version: {protocol.PluginName: &protocol.Plugin{Impl: b, Logger: logger}},
		},
		GRPCServer: plugin.DefaultGRPCServer,
		Logger:     logger,
	})
}

// keepDescendants makes this process a child subreaper and ends its descendants,
// then itself, on SIGTERM.
func keepDescendants() {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		Logger().Warn("cannot become a child subreaper; processes that daemonize may outlive their run", "error", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		<-sigs
		contract.KillTree(os.Getpid()) // its descendants first, then this process
		os.Exit(1)
	}()
}
