// Command fsdpbench benchmarks distributed (FSDP-family) training: it expands a sweep
// spec into runs, executes them through a backend, and reports normalized results.
// This package only wires the sweeps, harness, backends and results packages.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopSignals := func() {}
	// A gotrain worker stops on signals itself (gotrain.Worker), without the
	// sweep's "press Ctrl-C again" dialogue in its log.
	if len(os.Args) < 2 || os.Args[1] != "worker" {
		stopSignals = onInterrupt(cancel, notices, func() { os.Exit(ExitInterrupted) })
	}
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stopSignals()
	os.Exit(code)
}

// onInterrupt cancels the context on the first SIGINT, SIGTERM or SIGHUP (a closed
// terminal or session would otherwise kill fsdpbench where it stands), so running runs
// stop and their state is recorded, and calls force on the second. It returns the
// function that stops listening.
func onInterrupt(cancel context.CancelFunc, stderr io.Writer, force func()) func() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
		case <-done:
			return
		}
		fmt.Fprintln(stderr, "interrupting: stopping cleanly; press Ctrl-C again to force")
		cancel()
		select {
		case <-sigs:
			fmt.Fprintln(stderr, "interrupted")
			force()
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

// notices is where main's signal notices go: stderr, or, while a sweep draws
// progress bars, a writer that prints above them (harness.Options.OnConsole).
var notices = &console{fallback: os.Stderr}

// console is an io.Writer whose destination can be switched while other
// goroutines write to it.
type console struct {
	mu       sync.Mutex
	fallback io.Writer
	over     io.Writer
}

// Write writes to the redirected writer if one is set, else to the fallback.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over != nil {
		return c.over.Write(p)
	}
	return c.fallback.Write(p)
}

// redirect sends later writes to w; nil sends them back to the fallback.
func (c *console) redirect(w io.Writer) {
	c.mu.Lock()
	c.over = w
	c.mu.Unlock()
}
