// Package plugintest checks a plugin binary against the fsdpbench backend contract:
// it describes itself as available, refuses a bad configuration with a reason,
// accepts and runs a good one to status ok with its events, and stops its
// processes when a run is cancelled. Plugin authors call Check from a test after
// building their binary:
//
//	plugintest.Check(t, binPath, plugintest.Config{Run: good, Bad: bad})
package plugintest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/plugins"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Config says what to run. Run and Bad are required.
type Config struct {
	// Name is the backend's name; default: the binary's name after fsdpbench-backend-.
	Name string
	// Run is a configuration the plugin must accept and run to status ok.
	Run sweeps.RunConfig
	// Bad is a configuration the plugin's Validate must refuse.
	Bad sweeps.RunConfig
	// Cancel is a run long enough to be cancelled one second after it starts; the
	// plugin must then return and leave no process running. Default: Run.
	Cancel sweeps.RunConfig
	// Checksum, when set, is the SHA-256 the binary must have (as plugins.lock pins it).
	Checksum []byte
	// Timeout bounds each check. Default 60 s.
	Timeout time.Duration
	// CancelWithin is how soon a cancelled run must return. Default 10 s.
	CancelWithin time.Duration
}

// Failure is one check that did not pass, and why.
type Failure struct {
	Check  string
	Reason string
}

func (f Failure) String() string { return f.Check + ": " + f.Reason }

// Check runs the checks and reports each failure through t.
func Check(t testing.TB, path string, cfg Config) {
	t.Helper()
	for _, f := range Run(context.Background(), path, cfg) {
		t.Errorf("plugin %s: %s", path, f)
	}
}

// Run runs the checks (describe, validate-bad, validate-good, run, cancel) and
// returns the failures; a plugin that cannot be described fails that one check only.
func Run(ctx context.Context, path string, cfg Config) []Failure {
	if cfg.Name == "" {
		cfg.Name = strings.TrimPrefix(filepath.Base(path), plugins.Prefix)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.CancelWithin <= 0 {
		cfg.CancelWithin = 10 * time.Second
	}
	if cfg.Cancel.ID == "" && cfg.Cancel.WorldSize == 0 {
		cfg.Cancel = cfg.Run
	}
	var (
		mu        sync.Mutex
		leftovers int
	)
	b := plugins.New(cfg.Name, path, plugins.Options{
		Checksum: cfg.Checksum,
		Leftovers: func(n int) {
			mu.Lock()
			leftovers += n
			mu.Unlock()
		},
	})
	var out []Failure
	fail := func(check, format string, args ...any) {
		out = append(out, Failure{Check: check, Reason: fmt.Sprintf(format, args...)})
	}
	within := func(d time.Duration) (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, d) }

	c, cancel := within(cfg.Timeout)
	d, err := b.Describe(c)
	cancel()
	switch {
	case err != nil:
		fail("describe", "%v", err)
		return out
	case !d.Available:
		fail("describe", "not available: %s", orNone(d.Reason))
		return out
	}

	c, cancel = within(cfg.Timeout)
	err = b.Validate(c, cfg.Bad)
	cancel()
	switch {
	case err == nil:
		fail("validate-bad", "accepted a configuration it must refuse (%s)", describeRC(cfg.Bad))
	case strings.TrimSpace(err.Error()) == "":
		fail("validate-bad", "refused with an empty reason; say what is wrong and what to set")
	}
	c, cancel = within(cfg.Timeout)
	err = b.Validate(c, cfg.Run)
	cancel()
	if err != nil {
		fail("validate-good", "refused %s: %v", describeRC(cfg.Run), err)
	}

	if r := runOnce(ctx, b, cfg.Run, cfg.Timeout, 0); r != "" {
		fail("run", "%s", r)
	}

	mu.Lock()
	leftovers = 0 // count what the cancel check leaves, not a run that timed out
	mu.Unlock()
	begin := time.Now()
	r := runOnce(ctx, b, cfg.Cancel, cfg.CancelWithin, time.Second)
	if r != "" {
		fail("cancel", "%s", r)
	} else if took := time.Since(begin) - time.Second; took > cfg.CancelWithin {
		fail("cancel", "returned %s after cancellation, more than %s", took.Round(time.Millisecond), cfg.CancelWithin)
	}
	mu.Lock()
	if leftovers > 0 {
		fail("cancel", "after cancellation the plugin left %d process(es) running past the grace period (the host killed them); a backend must stop its processes when ctx ends", leftovers)
	}
	mu.Unlock()
	return out
}

// runOnce runs rc in a temporary run directory and returns what was wrong, or "".
// With cancelAfter > 0 the run is cancelled that long after it starts and must end
// canceled (or with the cancellation as its error) within limit; otherwise it must
// end ok within limit with started, step and finished events.
func runOnce(parent context.Context, b backends.Backend, rc sweeps.RunConfig, limit, cancelAfter time.Duration) string {
	dir, err := os.MkdirTemp("", "plugintest-run")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	var (
		mu     sync.Mutex
		events []backends.Event
		logs   strings.Builder
	)
	emit := func(ev backends.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}
	w := lockedWriter{mu: &mu, b: &logs}
	env := backends.RunEnv{RunDir: dir, Launcher: "local", Stdout: w, Stderr: w}
	ctx, cancel := context.WithTimeout(parent, limit+cancelAfter)
	defer cancel()
	if cancelAfter > 0 {
		t := time.AfterFunc(cancelAfter, cancel)
		defer t.Stop()
	}
	res, err := b.Run(ctx, rc, env, emit)
	mu.Lock()
	defer mu.Unlock()
	if cancelAfter > 0 {
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return fmt.Sprintf("did not return within %s of being cancelled", limit)
		case err == nil && res.Status == results.StatusOK:
			return fmt.Sprintf("finished ok before it could be cancelled after %s; give Config.Cancel a longer run", cancelAfter)
		case err == nil && res.Status != results.StatusCanceled:
			return fmt.Sprintf("ended %q after cancellation, want %q", res.Status, results.StatusCanceled)
		case err != nil && !errors.Is(err, context.Canceled):
			return fmt.Sprintf("failed instead of stopping: %v", err)
		}
		return ""
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Sprintf("did not finish within %s (%v)", limit, err)
	case err != nil:
		return err.Error()
	case res.Status != results.StatusOK:
		return fmt.Sprintf("ended %q, want ok: %s%s", res.Status, orNone(res.Error), logTail(logs.String()))
	case len(res.Steps) != rc.Steps:
		return fmt.Sprintf("reported %d measured steps, want %d (steps: in the config)", len(res.Steps), rc.Steps)
	}
	kinds := map[backends.EventKind]int{}
	var finished backends.Event
	for _, ev := range events {
		kinds[ev.Kind]++
		if ev.Kind == backends.EventFinished {
			finished = ev
		}
	}
	switch {
	case kinds[backends.EventStarted] != 1:
		return fmt.Sprintf("emitted %d started events, want 1", kinds[backends.EventStarted])
	case kinds[backends.EventStep] == 0:
		return "emitted no step events"
	case kinds[backends.EventFinished] != 1:
		return fmt.Sprintf("emitted %d finished events, want 1", kinds[backends.EventFinished])
	case finished.Status != res.Status:
		return fmt.Sprintf("the finished event says %q but the result says %q", finished.Status, res.Status)
	}
	return ""
}

func describeRC(rc sweeps.RunConfig) string {
	return fmt.Sprintf("world_size %d, batch_per_device %d, sharding %q, options %v", rc.WorldSize, rc.BatchPerDevice, rc.Sharding, rc.BackendOptions)
}

func orNone(s string) string {
	if s == "" {
		return "(no reason given)"
	}
	return s
}

func logTail(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if len(s) > 1000 {
		s = "..." + s[len(s)-1000:]
	}
	return "; its log ends with: " + s
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
