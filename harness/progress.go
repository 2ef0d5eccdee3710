package harness

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/termsafe"
)

// progress shows a sweep's advance. Its methods are called from every running task.
type progress interface {
	started(rc sweeps.RunConfig)
	// startedRepeat says repeat r (from 0) of rc starts in the interleaved order
	// (RepeatsInterleaved), where a run's repeats do not follow each other; the
	// run counts as finished only at finished.
	startedRepeat(rc sweeps.RunConfig, r int)
	// repeatDone says the repeat started last of the run ended and the run goes
	// on in a later round.
	repeatDone(id string)
	// round says an interleaved round starts: repeat r (from 0) of runs runs,
	// of at most rounds.
	round(r, rounds, runs int)
	// queued says the run waits for a scheduler (Slurm), and why.
	queued(id, reason string)
	step(id string)
	finished(o Outcome)
	addTotal(n int)
	close()
}

func newProgress(opts Options, sweep string, total int) progress {
	mode := opts.Progress
	if mode == ProgressAuto {
		mode = ProgressPlain
		if f, ok := opts.Out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			mode = ProgressBars
		}
	}
	switch mode {
	case ProgressNone:
		return &plain{out: io.Discard, total: total}
	case ProgressBars:
		return newBars(opts.Out, sweep, total, opts.OnConsole)
	default:
		return &plain{out: opts.Out, total: total}
	}
}

// describe is the line printed when a run ends, e.g.
// "ws4-bs2-full_shard-ac1-pre-3fa9c2d1 ok 1.2 s tokens/s/rank=1234".
func describe(o Outcome) string {
	var b strings.Builder
	b.WriteString(o.Config.ID)
	b.WriteByte(' ')
	if o.Skipped {
		fmt.Fprintf(&b, "skipped (done: %s)", o.Status)
		return b.String()
	}
	b.WriteString(string(o.Status))
	switch o.Status {
	case results.StatusOK:
		fmt.Fprintf(&b, " %.1f s", o.Wall.Seconds())
		if v := o.Metrics.TokensPerSPerRank; v != nil {
			fmt.Fprintf(&b, " tokens/s/rank=%.4g", *v)
		}
		// In the unit that suits the figure (a CPU run's MiB are no 0.00 GiB); as
		// the default table, the allocated peak where there is no allocator
		// reserve (the cpu device), else the resident set (torch on CPU).
		switch m := &o.Metrics; {
		case m.PeakMemReservedBytes != nil:
			fmt.Fprintf(&b, " peak_reserved=%s", results.FormatBytes(float64(*m.PeakMemReservedBytes)))
		case m.PeakMemAllocatedBytes != nil:
			fmt.Fprintf(&b, " peak_allocated=%s", results.FormatBytes(float64(*m.PeakMemAllocatedBytes)))
		case m.PeakRSSBytes != nil:
			fmt.Fprintf(&b, " peak_rss=%s", results.FormatBytes(float64(*m.PeakRSSBytes)))
		}
		// A run measured with a caveat (a script that ran more iterations than
		// configured, tokens per step that disagree) says so here, not only in
		// metrics.json.
		if ws := warnings(o.Metrics.Extra); len(ws) > 0 {
			fmt.Fprintf(&b, "; warning: %s", termsafe.Line(firstLine(ws[0])))
			if len(ws) > 1 {
				fmt.Fprintf(&b, " (and %d more in metrics.json's extra.warnings)", len(ws)-1)
			}
		}
	case results.StatusCanceled:
	default:
		if o.Error != "" {
			b.WriteString(": ")
			// The error is the run's own words (a script's exception line): escaped,
			// so that it cannot retitle or clear the operator's terminal.
			b.WriteString(termsafe.Line(firstLine(o.Error)))
		}
	}
	return b.String()
}

// warnings reads a run's extra.warnings: the backends' []string, or []any once
// read back from metrics.json.
func warnings(extra map[string]any) []string {
	switch ws := extra["warnings"].(type) {
	case []string:
		return ws
	case []any:
		var out []string
		for _, w := range ws {
			if s, ok := w.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// plain prints one line per finished or skipped run: "[3/24] <describe>".
type plain struct {
	mu    sync.Mutex
	out   io.Writer
	done  int
	total int
}

func (p *plain) started(sweeps.RunConfig) {}

// The plain lines name finished runs only: a line per repeat would bury them.
func (p *plain) startedRepeat(sweeps.RunConfig, int) {}
func (p *plain) repeatDone(string)                   {}

// round prints a line per round, so a log shows the sweep going on while no run
// has all its repeats yet.
func (p *plain) round(r, rounds, runs int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "round %d of %d: %d runs, one repeat each\n", r+1, rounds, runs)
}
func (p *plain) step(string) {}

// queued prints a line each time the reason changes (the launcher reports only
// changes), so a run pending on a down node does not wait in silence.
func (p *plain) queued(id, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "%s queued: %s\n", id, termsafe.Line(reason))
}
func (p *plain) close() {}

func (p *plain) addTotal(n int) {
	p.mu.Lock()
	p.total += n
	p.mu.Unlock()
}

func (p *plain) finished(o Outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	fmt.Fprintf(p.out, "[%d/%d] %s\n", p.done, p.total, describe(o))
}

// bars draws one bar for the sweep and one per running run (its steps), and prints
// each finished run's line above them.
type bars struct {
	mu      sync.Mutex
	p       *mpb.Progress
	overall *mpb.Bar
	runs    map[string]*mpb.Bar
	done    int
	total   int
	// measured and measuredWall are the runs that ran (not skipped as done) and
	// their summed wall time, for the ETA.
	measured     int
	measuredWall time.Duration
	// stopped is set when the sweep ends short of its total (interrupted).
	stopped bool
	// reasons holds why each queued run waits (queued).
	reasons map[string]string
	console func(io.Writer)
}

func newBars(out io.Writer, sweep string, total int, console func(io.Writer)) *bars {
	p := mpb.New(mpb.WithOutput(out), mpb.WithWidth(40), mpb.WithAutoRefresh())
	b := &bars{p: p, runs: map[string]*mpb.Bar{}, total: total, console: console}
	// Created without a total, then given one: mpb completes a bar built with a
	// total > 0 by itself when it reaches it, and ignores SetTotal on it from then
	// on. A max_fit search raises the total as it goes (addTotal), and an
	// interrupted sweep never reaches it, so the bar must stay settable and be
	// completed by close, or Wait never returns.
	b.overall = p.AddBar(0,
		// Only the name precedes the bar, so that every bar starts in the same column.
		mpb.PrependDecorators(decor.Name(sweep+" ", decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.CountersNoUnit("%d/%d runs "), decor.Elapsed(decor.ET_STYLE_GO), decor.Any(b.eta)),
	)
	b.overall.SetTotal(int64(total), false)
	if console != nil {
		// Lines for the terminal go through mpb from now on (printed above the bars);
		// written past it, they would tear the bars and leave copies in the scrollback.
		console(aboveBars{p})
	}
	return b
}

// eta estimates the time left from the runs measured so far: their mean wall time
// times the runs left. Runs skipped as done take no time and are not counted.
func (b *bars) eta(decor.Statistics) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	left := b.total - b.done
	if b.stopped {
		return " stopped"
	}
	if b.measured == 0 || left <= 0 {
		return ""
	}
	per := b.measuredWall / time.Duration(b.measured)
	return fmt.Sprintf(" ETA %s", (per * time.Duration(left)).Round(time.Second))
}

func (b *bars) started(rc sweeps.RunConfig) {
	// Backends report measured steps only (results.Step), not the warm-up.
	steps := int64(max(rc.Steps, 1) * max(rc.Repeats, 1))
	bar := b.p.AddBar(steps,
		mpb.BarRemoveOnComplete(),
		mpb.PrependDecorators(decor.Name("  "+rc.ID+" ", decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.CountersNoUnit("%d/%d steps"), b.queueNote(rc.ID)),
	)
	b.mu.Lock()
	b.runs[rc.ID] = bar
	b.mu.Unlock()
}

// startedRepeat draws a bar for the steps of one repeat, named by the run and
// the repeat ("repeat 2/6"), removed when the repeat ends (repeatDone).
func (b *bars) startedRepeat(rc sweeps.RunConfig, r int) {
	bar := b.p.AddBar(int64(max(rc.Steps, 1)),
		mpb.BarRemoveOnComplete(),
		mpb.PrependDecorators(decor.Name(fmt.Sprintf("  %s repeat %d/%d ", rc.ID, r+1, max(rc.Repeats, 1)), decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.CountersNoUnit("%d/%d steps"), b.queueNote(rc.ID)),
	)
	b.mu.Lock()
	b.runs[rc.ID] = bar
	b.mu.Unlock()
}

// round needs no line: each repeat's bar names its repeat.
func (b *bars) round(int, int, int) {}

func (b *bars) repeatDone(id string) {
	b.mu.Lock()
	bar := b.runs[id]
	delete(b.runs, id)
	b.mu.Unlock()
	if bar != nil {
		bar.Abort(true)
	}
}

// queued shows the pending reason on the run's bar, until its first step.
func (b *bars) queued(id, reason string) {
	b.mu.Lock()
	if b.reasons == nil {
		b.reasons = map[string]string{}
	}
	b.reasons[id] = termsafe.Line(reason)
	b.mu.Unlock()
}

// queueNote is the run's bar's note: "queued (Resources)" while it waits.
func (b *bars) queueNote(id string) decor.Decorator {
	return decor.Any(func(st decor.Statistics) string { return b.reasonNote(id, st.Current) })
}

func (b *bars) reasonNote(id string, steps int64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r, ok := b.reasons[id]; ok && steps == 0 {
		return " queued (" + r + ")"
	}
	return ""
}

func (b *bars) step(id string) {
	b.mu.Lock()
	bar := b.runs[id]
	b.mu.Unlock()
	if bar != nil {
		bar.Increment()
	}
}

func (b *bars) finished(o Outcome) {
	b.mu.Lock()
	bar := b.runs[o.Config.ID]
	delete(b.runs, o.Config.ID)
	delete(b.reasons, o.Config.ID)
	b.done++
	if !o.Skipped && o.Status != results.StatusCanceled {
		b.measured++
		b.measuredWall += o.Wall
	}
	line := fmt.Sprintf("[%d/%d] %s\n", b.done, b.total, describe(o))
	b.mu.Unlock()
	_, _ = b.p.Write([]byte(line))
	if bar != nil {
		bar.Abort(true)
	}
	b.overall.Increment()
}

func (b *bars) addTotal(n int) {
	b.mu.Lock()
	b.total += n
	total := b.total
	b.mu.Unlock()
	b.overall.SetTotal(int64(total), false)
}

// aboveBars prints a notice above the bars. The leading carriage return starts it
// in column 0 even where the terminal echoed "^C" at the cursor, which would
// otherwise shift the line and leave the echo in the scrollback.
type aboveBars struct{ p *mpb.Progress }

func (a aboveBars) Write(b []byte) (int, error) {
	if _, err := a.p.Write(append([]byte("\r"), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (b *bars) close() {
	b.mu.Lock()
	for id, bar := range b.runs {
		bar.Abort(true)
		delete(b.runs, id)
	}
	short := b.done < b.total
	b.stopped = short
	b.mu.Unlock()
	if b.console != nil {
		b.console(nil)
	}
	if short {
		// An interrupted sweep never reaches its total: the bar stays drawn where
		// it stopped ("3/26 runs ... stopped") and counts as ended for Wait.
		b.overall.Abort(false)
	} else {
		// Effective because the bar was built without a total (see newBars).
		b.overall.SetTotal(-1, true)
	}
	b.p.Wait()
}
