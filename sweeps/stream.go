package sweeps

import (
	"iter"
	"maps"
)

// planStream is what a streamed plan (Options.Stream) keeps to make its runs
// again: the spec's expansion without the runs, and the include entries' runs,
// which are few and held.
type planStream struct {
	x       *expander
	include []RunConfig
	count   int
	// paths resolves the grid runs' paths (nil: none to resolve).
	paths *pathResolver
}

// Len is the number of runs: len(Runs), or for a streamed plan the number All
// yields.
func (p *Plan) Len() int {
	if p.stream != nil {
		return p.stream.count
	}
	return len(p.Runs)
}

// Streamed reports whether the plan holds its runs in Runs (false) or makes
// them again on each pass of All (Options.Stream).
func (p *Plan) Streamed() bool { return p.stream != nil }

// All yields the runs in order: Runs, or for a streamed plan each run made
// again as expansion made it (the same values, IDs and order), a few
// microseconds each, so that a pass over a million-point grid holds one run at
// a time. Passes may run on several goroutines at once.
func (p *Plan) All() iter.Seq[RunConfig] {
	if p.stream == nil {
		return func(yield func(RunConfig) bool) {
			for _, rc := range p.Runs {
				if !yield(rc) {
					return
				}
			}
		}
	}
	return p.stream.all
}

// streamBatch is how many runs a pass makes ahead of its consumer, and
// streamAhead how many such batches: a pass over a large grid makes its runs on
// a goroutine of its own, so that hashing their IDs (half the work of making
// one) overlaps what the consumer does with them (plan's predictions).
const (
	streamBatch = 512
	streamAhead = 4
)

func (s *planStream) all(yield func(RunConfig) bool) {
	if s.x.gridCount < 4*streamBatch {
		s.makeRuns(yield)
		return
	}
	full := make(chan []RunConfig, streamAhead)
	free := make(chan []RunConfig, streamAhead+2)
	done := make(chan struct{})
	defer close(done) // the consumer stopped: so does the maker
	go func() {
		defer close(full)
		batch := make([]RunConfig, 0, streamBatch)
		send := func() bool {
			select {
			case full <- batch:
			case <-done:
				return false
			}
			select {
			case batch = <-free:
				batch = batch[:0]
			default:
				batch = make([]RunConfig, 0, streamBatch)
			}
			return true
		}
		s.makeRuns(func(rc RunConfig) bool {
			batch = append(batch, rc)
			return len(batch) < streamBatch || send()
		})
		if len(batch) > 0 {
			send()
		}
	}()
	for batch := range full {
		for _, rc := range batch {
			if !yield(rc) {
				return
			}
		}
		clear(batch) // the next runs' maps, not these, stay reachable
		select {
		case free <- batch:
		default:
		}
	}
}

// makeRuns yields the runs, made on the calling goroutine.
func (s *planStream) makeRuns(yield func(RunConfig) bool) {
	g := s.x.maker()
	grid := g.sp.grid
	m := g.baseMask
	for _, a := range grid {
		m |= 1 << a.d.f
	}
	idx := make([]int, len(grid))
	for n := 0; n < g.gridCount; n++ {
		rc := g.base
		for i := range grid {
			grid[i].vals[idx[i]].apply(&rc)
		}
		// Expansion kept exactly the points that are neither excluded nor
		// refused: nothing else got this far.
		ok := derive(&rc, m, g.nodeSize) == nil && g.excludedBy(&rc) < 0 && checkPoint(&rc) == nil
		for i := len(idx) - 1; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(grid[i].vals) {
				break
			}
			idx[i] = 0
		}
		if !ok {
			continue
		}
		g.inputHashes(&rc)
		rc.assignID()
		if s.paths != nil {
			s.paths.resolve(&rc)
		}
		if !yield(rc) {
			return
		}
	}
	for _, rc := range s.include {
		if !yield(rc) {
			return
		}
	}
}

// maker is a copy of x for making runs again, with caches of its own, so that
// passes of All may run at once.
func (x *expander) maker() *expander {
	g := &expander{p: x.p, sp: x.sp, base: x.base, baseMask: x.baseMask, gridCount: x.gridCount,
		nodeSizes: maps.Clone(x.nodeSizes), inputs: maps.Clone(x.inputs)}
	if g.nodeSizes == nil {
		g.nodeSizes = map[string]int{}
	}
	return g
}

// kept is the number of runs kept so far.
func (x *expander) kept() int {
	if x.stream {
		return x.count
	}
	return len(x.runs)
}

// observe counts a run kept by a streaming expansion and notes which axes
// differ from the first run's (varyingAxes).
func (x *expander) observe(rc *RunConfig) {
	x.count++
	if x.count == 1 {
		x.first = *rc
		return
	}
	markDifferent(&x.vary, &x.first, rc)
	for i, k := range x.dynKeys {
		if x.dynVary[i] {
			continue
		}
		a, aok := dynValue(&x.first, k)
		b, bok := dynValue(rc, k)
		x.dynVary[i] = aok != bok || a.s != b.s
	}
}

// hashedRun is the run an idHash's idx names: x.runs[idx], or for a streaming
// expansion grid point idx, made again.
func (x *expander) hashedRun(idx int) RunConfig {
	if !x.stream {
		return x.runs[idx]
	}
	return x.gridRun(idx)
}

// gridRun makes grid point n (its place in the odometer, last axis fastest)
// as expansion kept it, without its resolved paths.
func (x *expander) gridRun(n int) RunConfig {
	grid := x.sp.grid
	idx := make([]int, len(grid))
	for i := len(grid) - 1; i >= 0; i-- {
		idx[i] = n % len(grid[i].vals)
		n /= len(grid[i].vals)
	}
	// In the axes' order, as expandGrid applies them.
	rc := x.base
	m := x.baseMask
	for i := range grid {
		grid[i].vals[idx[i]].apply(&rc)
		m |= 1 << grid[i].d.f
	}
	derive(&rc, m, x.nodeSize)
	x.inputHashes(&rc)
	rc.assignID()
	return rc
}

// streamed is the planStream of a finished streaming expansion: what making
// the runs again needs, and not the IDs' hashes, which only the expansion's
// checks read.
func (x *expander) streamed() *planStream {
	s := &planStream{include: x.runs, count: x.count}
	s.x = &expander{p: x.p, sp: x.sp, base: x.base, baseMask: x.baseMask, gridCount: x.gridCount,
		nodeSizes: x.nodeSizes, inputs: x.inputs}
	return s
}
