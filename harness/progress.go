package harness

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// progress shows a sweep's advance. Its methods are called from every running task.
type progress interface {
	started(rc sweeps.RunConfig)
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
		return newBars(opts.Out, sweep, total)
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
	case results.StatusCanceled:
	default:
		if o.Error != "" {
			b.WriteString(": ")
			b.WriteString(firstLine(o.Error))
		}
	}
	return b.String()
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
func (p *plain) step(string)              {}
func (p *plain) close()                   {}

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
}

func newBars(out io.Writer, sweep string, total int) *bars {
	p := mpb.New(mpb.WithOutput(out), mpb.WithWidth(40), mpb.WithAutoRefresh())
	b := &bars{p: p, runs: map[string]*mpb.Bar{}, total: total}
	b.overall = p.AddBar(int64(total),
		// Only the name precedes the bar, so that every bar starts in the same column.
		mpb.PrependDecorators(decor.Name(sweep+" ", decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.CountersNoUnit("%d/%d runs "), decor.Elapsed(decor.ET_STYLE_GO)),
	)
	return b
}

func (b *bars) started(rc sweeps.RunConfig) {
	// Backends report measured steps only (results.Step), not the warm-up.
	steps := int64(max(rc.Steps, 1) * max(rc.Repeats, 1))
	bar := b.p.AddBar(steps,
		mpb.BarRemoveOnComplete(),
		mpb.PrependDecorators(decor.Name("  "+rc.ID+" ", decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.CountersNoUnit("%d/%d steps")),
	)
	b.mu.Lock()
	b.runs[rc.ID] = bar
	b.mu.Unlock()
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
	b.done++
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

func (b *bars) close() {
	b.mu.Lock()
	for id, bar := range b.runs {
		bar.Abort(true)
		delete(b.runs, id)
	}
	b.mu.Unlock()
	// An interrupted sweep never reaches its total; complete the bar where it is.
	b.overall.SetTotal(-1, true)
	b.p.Wait()
}
