package results

import (
	"slices"
	"sort"
)

// axisValues is one axis over a set of runs: its distinct values in display order
// and, per run, the rank of its value among them. Reports group, sort and label by
// rank, so each run's value is read and compared once, not once per comparison
// (100,000-run sweeps).
type axisValues struct {
	col    Column
	values []any    // distinct values, ordered by compareValues
	text   []string // table text of each value
	rank   []int32  // per run: index into values
}

func newAxisValues(runs []Run, c Column) *axisValues {
	seen := map[any]int32{}
	var distinct []any
	rank := make([]int32, len(runs))
	var last any
	lastRank := int32(-1)
	for i := range runs {
		v := c.Value(&runs[i])
		if lastRank >= 0 && v == last {
			// Most axes are constant or change rarely from one run to the next; the
			// comparison is much cheaper than hashing the value.
			rank[i] = lastRank
			continue
		}
		k, ok := seen[v]
		if !ok {
			k = int32(len(distinct))
			seen[v] = k
			distinct = append(distinct, v)
		}
		rank[i], last, lastRank = k, v, k
	}
	order := make([]int32, len(distinct))
	for i := range order {
		order[i] = int32(i)
	}
	sort.SliceStable(order, func(a, b int) bool { return compareValues(&c, distinct[order[a]], distinct[order[b]]) < 0 })
	remap := make([]int32, len(distinct))
	a := &axisValues{col: c, values: make([]any, len(distinct)), text: make([]string, len(distinct)), rank: rank}
	for pos, old := range order {
		remap[old] = int32(pos)
		a.values[pos] = distinct[old]
		a.text[pos] = displayValue(&c, distinct[old], GiB) // axes hold no bytes
	}
	for i := range rank {
		rank[i] = remap[rank[i]]
	}
	return a
}

// numeric reports whether the axis holds numbers (tables align them right).
func (a *axisValues) numeric() bool {
	for _, v := range a.values {
		switch v.(type) {
		case int64, float64:
			return true
		}
	}
	return false
}

// axisSet computes each axis's values over one set of runs, once.
type axisSet struct {
	runs   []Run
	byName map[string]*axisValues
}

func newAxisSet(runs []Run) *axisSet { return &axisSet{runs: runs, byName: map[string]*axisValues{}} }

func (s *axisSet) get(c Column) *axisValues {
	a, ok := s.byName[c.Name]
	if !ok {
		a = newAxisValues(s.runs, c)
		s.byName[c.Name] = a
	}
	return a
}

// varying lists the axes (registry order) whose value is not the same in every run.
func (s *axisSet) varying() []*axisValues {
	var out []*axisValues
	for _, c := range append(ColumnsOf(KindAxis), DynamicColumns(s.runs)...) {
		if a := s.get(c); len(a.values) > 1 {
			out = append(out, a)
		}
	}
	return out
}

// order returns the run indices sorted by the axes, the first one first.
func (s *axisSet) order(axes []*axisValues) []int {
	idx := make([]int, len(s.runs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(x, y int) int {
		for _, a := range axes {
			if d := a.rank[x] - a.rank[y]; d != 0 {
				return int(d)
			}
		}
		return 0
	})
	return idx
}

// groups numbers the distinct value tuples of axes in sorted order: tuple[i] is
// run i's group, first[g] a run of group g. With no axes every run is in group 0;
// with no runs there are no groups.
func (s *axisSet) groups(axes []*axisValues) (tuple []int32, first []int) {
	tuple = make([]int32, len(s.runs))
	prev := -1
	for _, i := range s.order(axes) {
		if prev < 0 || !sameRanks(axes, prev, i) {
			first = append(first, i)
		}
		tuple[i] = int32(len(first) - 1)
		prev = i
	}
	return tuple, first
}

func sameRanks(axes []*axisValues, i, j int) bool {
	for _, a := range axes {
		if a.rank[i] != a.rank[j] {
			return false
		}
	}
	return true
}

// separating returns the axes, beyond the named ones, needed to tell the runs apart:
// in registry order, an axis is added when two runs agree on every axis so far but
// not on it. Axes that follow from the others (gpus_per_node and global_batch when
// world_size is named) are left out, so they do not split a pivot's rows.
func (s *axisSet) separating(named []*axisValues) []*axisValues {
	skip := map[string]bool{}
	for _, a := range named {
		skip[a.col.Name] = true
	}
	key, firsts := s.groups(named)
	n := int32(len(firsts))
	var out []*axisValues
	for _, a := range s.varying() {
		if skip[a.col.Name] {
			continue
		}
		seen := make([]int32, n)
		for i := range seen {
			seen[i] = -1
		}
		splits := false
		for i, k := range key {
			if seen[k] < 0 {
				seen[k] = a.rank[i]
			} else if seen[k] != a.rank[i] {
				splits = true
				break
			}
		}
		if !splits {
			continue
		}
		out = append(out, a)
		renumber := map[[2]int32]int32{}
		for i := range key {
			p := [2]int32{key[i], a.rank[i]}
			k, ok := renumber[p]
			if !ok {
				k = int32(len(renumber))
				renumber[p] = k
			}
			key[i] = k
		}
		n = int32(len(renumber))
	}
	return out
}
