package harness

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/harness/launch"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// preflightListed is how many runs a spec error names before "and N more".
const preflightListed = 3

// Preflight checks what the spec asks of every run's backend and launcher before
// anything runs: launcher_options for the run's launcher, a backend that cannot run
// under that launcher (sim or a plugin under Slurm), and each backend's Validate.
// It returns a *backends.SpecError when any of them is a mistake in the spec (a
// misspelt or invalid option, a plugin that may not run), naming the problem and
// the runs it hits, since every such run would fail alike; the sweep and plan
// commands then exit 2. Runs that are merely infeasible are not its business: the
// sweep records them as results.
func Preflight(ctx context.Context, plan *sweeps.Plan, reg *backends.Registry) error {
	if plan == nil || reg == nil {
		return nil
	}
	type problem struct {
		msg  string
		runs []string
	}
	var (
		mu       sync.Mutex
		problems = map[string]*problem{}
		order    []string
		// positioned holds the messages that begin with where the spec gave
		// the option.
		positioned = map[string]bool{}
	)
	found := func(rc sweeps.RunConfig, err error) {
		mu.Lock()
		defer mu.Unlock()
		msg := err.Error()
		if where := optionWhere(plan, rc, msg); where != "" {
			msg = where + ": " + msg
			positioned[msg] = true
		}
		p, ok := problems[msg]
		if !ok {
			p = &problem{msg: msg}
			problems[msg] = p
			order = append(order, msg)
		}
		p.runs = append(p.runs, rc.ID)
	}
	// Validate may start a process (a plugin, a torch probe): a few at a time.
	p := pool.New().WithMaxGoroutines(max(2, min(runtime.NumCPU(), 8)))
	for _, rc := range plan.Runs {
		if ctx.Err() != nil {
			break
		}
		launcherName := launcherName(plan, rc)
		if err := launch.CheckOptions(launcherName, rc.LauncherOptions); err != nil {
			found(rc, err)
			continue
		}
		be, err := reg.Get(backendName(plan, rc))
		if err != nil {
			found(rc, backends.SpecErr(err))
			continue
		}
		if _, isJob := be.(backends.JobBackend); launcherName == launch.SlurmName && !isJob {
			found(rc, backends.SpecErrorf("backend %s cannot run under launcher slurm: it does not describe its runs as processes "+
				"for a job script (gotrain and torchrun do); use launcher: local (--set launcher=local)", be.Name()))
			continue
		}
		p.Go(func() {
			if err := validateSafely(ctx, be, rc); backends.IsSpecError(err) {
				found(rc, err)
			}
		})
	}
	p.Wait()
	if len(order) == 0 {
		return nil // an interruption is the sweep's to report, with what did not start
	}
	// Plan order, so the same spec reports the same way every time.
	index := map[string]int{}
	for i, rc := range plan.Runs {
		index[rc.ID] = i
	}
	lines := make([]string, 0, len(order))
	linePositioned := map[string]bool{}
	for _, msg := range order {
		pr := problems[msg]
		sort.Slice(pr.runs, func(i, j int) bool { return index[pr.runs[i]] < index[pr.runs[j]] })
		line := msg + " (" + runList(pr.runs, len(plan.Runs)) + ")"
		lines = append(lines, line)
		linePositioned[line] = positioned[msg]
	}
	sort.Strings(lines)
	if linePositioned[lines[0]] {
		// file:line:col first, as compilers print, so editors can jump to it.
		return backends.SpecErrorf("%s", strings.Join(lines, "\n"))
	}
	return backends.SpecErrorf("sweep %s: %s", plan.Name, strings.Join(lines, "\n"))
}

// optionName finds the option a backend's message is about.
var optionName = regexp.MustCompile(`\b((?:backend|launcher)_options\.[A-Za-z0-9_.-]+?)(?:[:\s\[]|$)`)

// optionWhere is where the spec gave the option msg is about ("spec.yaml:9:3"),
// or "" when msg names none the plan knows. For an option rc has from an axis
// (backend_options.transport: [shm, tcp]), that is where rc's value was written.
func optionWhere(plan *sweeps.Plan, rc sweeps.RunConfig, msg string) string {
	m := optionName.FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	key := m[1]
	if name, ok := strings.CutPrefix(key, "backend_options."); ok && slices.Contains(rc.OptionAxes, name) {
		if where, ok := plan.OptionPos[sweeps.OptionValueKey(name, rc.BackendOptions[name])]; ok {
			return where
		}
	}
	for {
		if where, ok := plan.OptionPos[key]; ok {
			return where
		}
		i := strings.LastIndexByte(key, '.')
		if i <= strings.IndexByte(key, '.') {
			return ""
		}
		key = key[:i] // logs.metrics.x was given as logs:
	}
}

// runList names the runs a problem hits: all of them, or the first few.
func runList(ids []string, total int) string {
	switch {
	case len(ids) == total && total > 1:
		return fmt.Sprintf("all %d runs", total)
	case len(ids) <= preflightListed:
		return "run " + strings.Join(ids, ", ")
	}
	return fmt.Sprintf("runs %s and %d more", strings.Join(ids[:preflightListed], ", "), len(ids)-preflightListed)
}

// preflightTimeout bounds one Validate call of the preflight: a backend that takes
// longer (a hung plugin) gives no verdict here, and its runs report it themselves.
const preflightTimeout = time.Minute

// validateSafely calls Validate, turning a panic into no verdict (the run itself
// then records the panic as a failure, as it would without the preflight), and
// stops waiting after preflightTimeout.
func validateSafely(ctx context.Context, be backends.Backend, rc sweeps.RunConfig) error {
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	ch := make(chan error, 1)
	go func() {
		defer func() {
			if recover() != nil {
				ch <- nil
			}
		}()
		ch <- be.Validate(ctx, rc)
	}()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return nil
	}
}
