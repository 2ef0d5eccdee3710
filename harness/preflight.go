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
	pf := NewPreflighter(plan, reg)
	// Validate may start a process (a plugin, a torch probe): a few at a time.
	p := pool.New().WithMaxGoroutines(max(2, min(runtime.NumCPU(), 8)))
	for rc := range plan.All() {
		if ctx.Err() != nil {
			break
		}
		seq, be := pf.begin(rc)
		if be == nil {
			continue
		}
		p.Go(func() {
			pf.validated(seq, rc, validateSafely(ctx, be, rc))
		})
	}
	p.Wait()
	return pf.Err()
}

// Preflighter is Preflight one run at a time, for a caller that walks the
// plan's runs itself and needs each run's verdict too (plan, which predicts
// every run as it goes and holds none of a large grid): Check each run in the
// plan's order, from one goroutine, then Err.
type Preflighter struct {
	plan *sweeps.Plan
	reg  *backends.Registry
	mu   sync.Mutex
	// problems are keyed by message, in order of discovery; positioned holds
	// the messages that begin with where the spec gave the option.
	problems   map[string]*problem
	order      []string
	positioned map[string]bool
	seq        int
}

// problem is one spec error and the runs it hits: the first few in plan
// order (by their place in it, seq), and how many.
type problem struct {
	msg   string
	first []seqID
	n     int
}

type seqID struct {
	seq int
	id  string
}

// NewPreflighter returns a Preflighter for plan's runs.
func NewPreflighter(plan *sweeps.Plan, reg *backends.Registry) *Preflighter {
	return &Preflighter{plan: plan, reg: reg, problems: map[string]*problem{}, positioned: map[string]bool{}}
}

// Check checks rc as Preflight does, validating it with validate (nil:
// the backend's Validate, without waiting past preflightTimeout or letting a
// panic out). It returns Validate's error, spec error or not, so that the
// caller need not ask again; nil also when rc failed before Validate (its
// launcher options, its backend), which Err reports.
func (pf *Preflighter) Check(ctx context.Context, rc sweeps.RunConfig, validate func(context.Context, backends.Backend, sweeps.RunConfig) error) error {
	seq, be := pf.begin(rc)
	if be == nil {
		return nil
	}
	if validate == nil {
		validate = validateSafely
	}
	err := validate(ctx, be, rc)
	pf.validated(seq, rc, err)
	return err
}

// Failed reports whether a spec error was found so far.
func (pf *Preflighter) Failed() bool {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return len(pf.order) > 0
}

// begin numbers rc and checks what comes before Validate, returning the
// backend to validate rc with (nil when rc failed already).
func (pf *Preflighter) begin(rc sweeps.RunConfig) (int, backends.Backend) {
	seq := pf.seq
	pf.seq++
	launcherName := launcherName(pf.plan, rc)
	if err := launch.CheckOptions(launcherName, rc.LauncherOptions); err != nil {
		pf.found(seq, rc, err)
		return seq, nil
	}
	be, err := pf.reg.Get(backendName(pf.plan, rc))
	if err != nil {
		pf.found(seq, rc, backends.SpecErr(err))
		return seq, nil
	}
	if _, isJob := be.(backends.JobBackend); launcherName == launch.SlurmName && !isJob {
		pf.found(seq, rc, backends.SpecErrorf("backend %s cannot run under launcher slurm: it does not describe its runs as processes "+
			"for a job script (gotrain and torchrun do); use launcher: local (--set launcher=local)", be.Name()))
		return seq, nil
	}
	return seq, be
}

// validated records Validate's verdict on run seq: a spec error is a problem.
func (pf *Preflighter) validated(seq int, rc sweeps.RunConfig, err error) {
	if backends.IsSpecError(err) {
		pf.found(seq, rc, err)
	}
}

func (pf *Preflighter) found(seq int, rc sweeps.RunConfig, err error) {
	msg := err.Error()
	where := optionWhere(pf.plan, rc, msg)
	if where != "" {
		msg = where + ": " + msg
	}
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if where != "" {
		pf.positioned[msg] = true
	}
	p, ok := pf.problems[msg]
	if !ok {
		p = &problem{msg: msg}
		pf.problems[msg] = p
		pf.order = append(pf.order, msg)
	}
	p.n++
	// Keep the first few in plan order: a problem of every run of a large
	// grid would otherwise hold all their IDs.
	i, _ := slices.BinarySearchFunc(p.first, seq, func(e seqID, s int) int { return e.seq - s })
	if i < preflightListed {
		p.first = slices.Insert(p.first, i, seqID{seq, rc.ID})
		p.first = p.first[:min(len(p.first), preflightListed)]
	}
}

// Err is the spec error the runs checked so far make (a *backends.SpecError),
// or nil.
func (pf *Preflighter) Err() error {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if len(pf.order) == 0 {
		return nil // an interruption is the sweep's to report, with what did not start
	}
	total := pf.plan.Len()
	lines := make([]string, 0, len(pf.order))
	linePositioned := map[string]bool{}
	for _, msg := range pf.order {
		pr := pf.problems[msg]
		ids := make([]string, len(pr.first))
		for i, f := range pr.first {
			ids[i] = f.id
		}
		line := msg + " (" + runCount(ids, pr.n, total) + ")"
		lines = append(lines, line)
		linePositioned[line] = pf.positioned[msg]
	}
	sort.Strings(lines)
	if linePositioned[lines[0]] {
		// file:line:col first, as compilers print, so editors can jump to it.
		return backends.SpecErrorf("%s", strings.Join(lines, "\n"))
	}
	return backends.SpecErrorf("sweep %s: %s", pf.plan.Name, strings.Join(lines, "\n"))
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
	return runCount(ids[:min(len(ids), preflightListed)], len(ids), total)
}

// runCount is runList of n runs of which first are the first few.
func runCount(first []string, n, total int) string {
	switch {
	case n == total && total > 1:
		return fmt.Sprintf("all %d runs", total)
	case n <= preflightListed:
		return "run " + strings.Join(first, ", ")
	}
	return fmt.Sprintf("runs %s and %d more", strings.Join(first[:preflightListed], ", "), n-preflightListed)
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
