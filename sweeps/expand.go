package sweeps

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxRuns bounds the number of grid points a spec may expand to, so a typo such as
// an extra zero cannot exhaust memory before anything runs.
const MaxRuns = 10_000_000

// maxProduct bounds world_size and global_batch, far beyond any cluster, so the
// products below cannot overflow.
const maxProduct = 1 << 40

// expander turns a checked spec into runs.
type expander struct {
	p    *parsing
	sp   *spec
	base RunConfig
	// baseVals are the axis values every point starts from (top level and base:).
	baseVals  []value
	baseMask  mask
	runs      []RunConfig
	ids       map[string]int  // run ID -> index in runs
	groups    map[string]int  // search group -> index in runs
	excluded  []int           // points dropped per exclude entry
	seen      map[string]bool // problems reported
	warnings  []string
	gridCount int
}

func (p *parsing) expand(sp *spec) *Plan {
	x := &expander{p: p, sp: sp, base: Defaults(), excluded: make([]int, len(sp.exclude)), seen: map[string]bool{}}
	for f := field(0); f < numFields; f++ {
		for _, k := range []*keyed{sp.top[f], sp.base[f]} {
			if k == nil {
				continue
			}
			k.v.apply(&x.base)
			if keyDefs[f].where&inAxis != 0 {
				x.baseVals = append(x.baseVals, k.v)
				x.baseMask |= 1 << f
			}
		}
	}
	x.base.BackendOptions = sp.backendOptions
	x.base.LauncherOptions = sp.launcherOptions
	if sp.search != "" {
		x.base.Search = sp.search
		x.groups = map[string]int{}
		p.checkSearch(sp)
		if p.e.failed() {
			return nil
		}
	}

	total := 1
	for _, g := range sp.grid {
		if total > MaxRuns/len(g.vals) {
			p.e.at(g.keyPos, "the grid has more than %d points; narrow an axis or split the sweep", MaxRuns)
			return nil
		}
		total *= len(g.vals)
	}
	x.gridCount = total
	x.runs = make([]RunConfig, 0, total+len(sp.include))
	x.ids = make(map[string]int, total+len(sp.include))
	x.expandGrid()
	if p.e.failed() {
		return nil
	}
	for i := range sp.include {
		x.expandInclude(&sp.include[i])
	}
	if p.e.failed() {
		return nil
	}
	if len(x.runs) == 0 {
		p.e.at(sp.excludePos, "exclude drops all %d points of the grid and there is no include, so there is nothing to run; remove or narrow an exclude entry", total)
		return nil
	}
	plan := &Plan{
		Name:     x.base.Sweep,
		Backend:  x.base.Backend,
		Launcher: x.base.Launcher,
		Runs:     x.runs,
		Search:   sp.search,
		Axes:     x.varyingAxes(),
	}
	plan.Warnings = x.warnings
	for i, n := range x.excluded {
		if n == 0 {
			plan.Warnings = append(plan.Warnings, sp.exclude[i].pos.errorf("this exclude entry matches no grid point; check its values").Error())
		}
	}
	return plan
}

// checkSearch refuses what a batch_per_device search cannot do.
func (p *parsing) checkSearch(sp *spec) {
	if k := sp.base[fGlobalBatch]; k != nil {
		p.e.at(k.keyPos, "global_batch cannot be fixed while search doubles batch_per_device; give grad_accum instead, or remove search:")
	}
	for _, g := range sp.grid {
		if g.d.f == fGlobalBatch {
			p.e.at(g.keyPos, "global_batch cannot be an axis while search doubles batch_per_device; give grad_accum instead, or remove search:")
		}
	}
	for _, in := range sp.include {
		for _, v := range in.vals {
			if v.f == fGlobalBatch {
				p.e.at(v.pos, "global_batch cannot be fixed while search doubles batch_per_device; give grad_accum instead, or remove search:")
			}
		}
	}
}

// expandGrid walks the grid like an odometer, last axis fastest.
func (x *expander) expandGrid() {
	grid := x.sp.grid
	m := x.baseMask
	for _, g := range grid {
		m |= 1 << g.d.f
	}
	idx := make([]int, len(grid))
	src := func(f field) (value, bool) {
		for i := len(grid) - 1; i >= 0; i-- {
			if grid[i].d.f == f {
				return grid[i].vals[idx[i]], true
			}
		}
		return x.baseSource(f)
	}
	describe := func() string {
		parts := make([]string, len(grid))
		for i, g := range grid {
			parts[i] = g.d.name + ": " + g.vals[idx[i]].String()
		}
		return "grid point {" + strings.Join(parts, ", ") + "}"
	}
	for n := 0; n < x.gridCount; n++ {
		rc := x.base
		for i := range grid {
			grid[i].vals[idx[i]].apply(&rc)
		}
		prob := derive(&rc, m)
		if !x.isExcluded(&rc) {
			if prob == nil {
				prob = checkPoint(&rc)
			}
			if prob != nil {
				if !x.report(prob, src, describe, true) {
					return
				}
			} else {
				x.add(rc, pos{})
			}
		}
		for i := len(idx) - 1; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(grid[i].vals) {
				break
			}
			idx[i] = 0
		}
	}
}

func (x *expander) expandInclude(in *includeEntry) {
	rc := x.base
	m := x.baseMask
	for _, v := range in.vals {
		v.apply(&rc)
		m |= 1 << v.f
	}
	src := func(f field) (value, bool) {
		for i := len(in.vals) - 1; i >= 0; i-- {
			if in.vals[i].f == f {
				return in.vals[i], true
			}
		}
		return x.baseSource(f)
	}
	prob := derive(&rc, m)
	if prob == nil {
		prob = checkPoint(&rc)
	}
	if prob != nil {
		x.report(prob, src, func() string { return fmt.Sprintf("include entry at %s", in.pos) }, false)
		return
	}
	x.add(rc, in.pos)
}

// baseSource returns the value of f shared by every point, if the spec gave one.
func (x *expander) baseSource(f field) (value, bool) {
	for i := len(x.baseVals) - 1; i >= 0; i-- {
		if x.baseVals[i].f == f {
			return x.baseVals[i], true
		}
	}
	return value{}, false
}

func (x *expander) isExcluded(rc *RunConfig) bool {
	for i := range x.sp.exclude {
		if matchesAll(rc, x.sp.exclude[i].conds) {
			x.excluded[i]++
			return true
		}
	}
	return false
}

func matchesAll(rc *RunConfig, conds []excludeCond) bool {
	for _, c := range conds {
		have := fieldValue(rc, c.f)
		found := false
		for _, v := range c.vals {
			if v.equal(have) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// add assigns the run's ID and appends it, merging it into an identical earlier
// point. from is the include entry's position (zero for a grid point).
func (x *expander) add(rc RunConfig, from pos) {
	if x.groups != nil {
		x.addSearch(rc)
		return
	}
	rc.AssignID()
	if i, dup := x.ids[rc.ID]; dup {
		x.merge(&x.runs[i], &rc, from)
		return
	}
	x.ids[rc.ID] = len(x.runs)
	x.runs = append(x.runs, rc)
}

// addSearch keeps one run per search group: the point with the smallest
// batch_per_device, where the search starts.
func (x *expander) addSearch(rc RunConfig) {
	rc.SearchGroup = searchGroup(rc)
	rc.AssignID()
	i, ok := x.groups[rc.SearchGroup]
	if !ok {
		x.groups[rc.SearchGroup] = len(x.runs)
		x.runs = append(x.runs, rc)
		return
	}
	if rc.BatchPerDevice < x.runs[i].BatchPerDevice {
		x.runs[i] = rc
	}
}

func (x *expander) merge(prev, rc *RunConfig, from pos) {
	if prev.trainingKey() != rc.trainingKey() {
		// Two configurations share 32 bits of SHA-256: about one chance in four
		// billion per pair. Refuse rather than let one overwrite the other's results.
		x.p.e.at(from, "runs %s and %s differ but their IDs collide (%s); change seed or split the sweep, and report this", prev.Slug, rc.Slug, rc.ID)
		return
	}
	if from.line > 0 {
		x.warnings = append(x.warnings, from.errorf("this include entry gives the same run as an earlier point (%s); it is merged", rc.ID).Error())
	}
}

// problem is why a point is invalid: a message about field f of the point.
type problem struct {
	f   field
	msg func(src func(field) (value, bool)) string
	// combo is set when removing the point with an exclude entry is a fix.
	combo string
}

// report records a point's problem at the position of the value it is about. It
// returns false once enough distinct problems are known.
func (x *expander) report(prob *problem, src func(field) (value, bool), point func() string, inGrid bool) bool {
	v, given := src(prob.f)
	at := v.pos
	if !given {
		at = x.sp.namePos
	}
	msg := prob.msg(src)
	key := at.String() + msg
	if x.seen[key] {
		return true
	}
	x.seen[key] = true
	fix := ""
	if prob.combo != "" && inGrid {
		fix = "; drop such points with `exclude: [" + prob.combo + "]`"
	}
	x.p.e.at(at, "%s (%s)%s", msg, point(), fix)
	return len(x.p.e.list) < maxErrors
}

// origin says where the value of f in a point came from, for messages.
func origin(src func(field) (value, bool), f field) string {
	if v, ok := src(f); ok {
		return "at " + v.pos.String()
	}
	switch f {
	case fNodes, fGPUsPerNode, fWorldSize, fGradAccum, fGlobalBatch:
		return "derived"
	}
	return "the default"
}

// derive fills the derived axes: world_size = nodes × gpus_per_node from any two
// (or world_size alone on one node), and global_batch = world_size ×
// batch_per_device × grad_accum, deriving grad_accum (or batch_per_device) when
// global_batch is given.
func derive(rc *RunConfig, m mask) *problem {
	n, g, w := m.has(fNodes), m.has(fGPUsPerNode), m.has(fWorldSize)
	switch {
	case n && g && w:
		if rc.Nodes*rc.GPUsPerNode != rc.WorldSize {
			nodes, gpn, ws := rc.Nodes, rc.GPUsPerNode, rc.WorldSize
			return &problem{f: fWorldSize, msg: func(src func(field) (value, bool)) string {
				return fmt.Sprintf("world_size %d does not equal nodes × gpus_per_node = %d × %d = %d (%s, %s); give two of the three", ws, nodes, gpn, nodes*gpn, origin(src, fNodes), origin(src, fGPUsPerNode))
			}}
		}
	case n && g:
		if rc.Nodes*rc.GPUsPerNode > maxProduct {
			return tooLarge(fNodes, "world_size")
		}
		rc.WorldSize = rc.Nodes * rc.GPUsPerNode
	case n && w:
		if rc.WorldSize%rc.Nodes != 0 {
			nodes, ws := rc.Nodes, rc.WorldSize
			return &problem{f: fWorldSize, msg: func(src func(field) (value, bool)) string {
				return fmt.Sprintf("world_size %d cannot be split evenly over nodes %d (%s); use a multiple of %d such as %s, or give gpus_per_node instead", ws, nodes, origin(src, fNodes), nodes, nearMultiples(ws, nodes))
			}}
		}
		rc.GPUsPerNode = rc.WorldSize / rc.Nodes
	case g && w:
		if rc.WorldSize%rc.GPUsPerNode != 0 {
			gpn, ws := rc.GPUsPerNode, rc.WorldSize
			return &problem{f: fWorldSize, msg: func(src func(field) (value, bool)) string {
				return fmt.Sprintf("world_size %d is not a whole number of nodes of gpus_per_node %d (%s); use a multiple of %d such as %s, or give nodes instead", ws, gpn, origin(src, fGPUsPerNode), gpn, nearMultiples(ws, gpn))
			}}
		}
		rc.Nodes = rc.WorldSize / rc.GPUsPerNode
	case w:
		rc.Nodes, rc.GPUsPerNode = 1, rc.WorldSize
	case g:
		rc.Nodes, rc.WorldSize = 1, rc.GPUsPerNode
	case n:
		nodes := rc.Nodes
		return &problem{f: fNodes, msg: func(func(field) (value, bool)) string {
			return fmt.Sprintf("nodes %d needs gpus_per_node (or world_size) too, e.g. gpus_per_node: 8", nodes)
		}}
	default:
		rc.Nodes, rc.GPUsPerNode, rc.WorldSize = 1, 1, 1
	}

	b, a, gb := m.has(fBatchPerDevice), m.has(fGradAccum), m.has(fGlobalBatch)
	ws, bpd, ga := rc.WorldSize, rc.BatchPerDevice, rc.GradAccum
	switch {
	case gb && a && b:
		if prod, ok := mul3(ws, bpd, ga); !ok || prod != rc.GlobalBatch {
			gbv := rc.GlobalBatch
			return &problem{f: fGlobalBatch, msg: func(src func(field) (value, bool)) string {
				return fmt.Sprintf("global_batch %d does not equal world_size × batch_per_device × grad_accum = %d × %d × %d = %d; give two of batch_per_device, grad_accum and global_batch", gbv, ws, bpd, ga, ws*bpd*ga)
			}}
		}
	case gb && a:
		per, ok := mul3(ws, ga, 1)
		if !ok || rc.GlobalBatch%per != 0 {
			gbv := rc.GlobalBatch
			return &problem{f: fGlobalBatch, msg: func(src func(field) (value, bool)) string {
				return fmt.Sprintf("global_batch %d is not a multiple of world_size × grad_accum = %d × %d = %d, so batch_per_device would not be whole; use a global_batch such as %s", gbv, ws, ga, per, nearMultiples(gbv, per))
			}}
		}
		rc.BatchPerDevice = rc.GlobalBatch / per
	case gb:
		per, ok := mul3(ws, bpd, 1)
		if !ok || rc.GlobalBatch%per != 0 {
			gbv := rc.GlobalBatch
			return &problem{f: fGlobalBatch, msg: func(src func(field) (value, bool)) string {
				return globalBatchAdvice(gbv, ws, bpd, src)
			}}
		}
		rc.GradAccum = rc.GlobalBatch / per
	default:
		prod, ok := mul3(ws, bpd, ga)
		if !ok {
			return tooLarge(fBatchPerDevice, "global_batch")
		}
		rc.GlobalBatch = prod
	}
	return nil
}

// checkPoint refuses combinations that no backend can run.
func checkPoint(rc *RunConfig) *problem {
	if rc.Sharding == HybridShard && rc.Nodes < 2 {
		nodes := rc.Nodes
		return &problem{f: fSharding, combo: "{sharding: hybrid_shard, nodes: 1}", msg: func(src func(field) (value, bool)) string {
			return fmt.Sprintf("hybrid_shard needs nodes >= 2 (it shards inside a node and replicates across nodes), but this point has nodes %d (%s); use full_shard on one node, or give nodes >= 2", nodes, origin(src, fNodes))
		}}
	}
	return nil
}

func tooLarge(f field, what string) *problem {
	return &problem{f: f, msg: func(func(field) (value, bool)) string {
		return fmt.Sprintf("%s would exceed %d; use smaller values", what, int64(maxProduct))
	}}
}

// mul3 multiplies positive ints, reporting false past maxProduct.
func mul3(a, b, c int) (int, bool) {
	if a <= 0 || b <= 0 || c <= 0 || a > maxProduct || b > maxProduct || c > maxProduct {
		return 0, false
	}
	ab := a * b
	if ab > maxProduct {
		return 0, false
	}
	abc := ab * c
	if abc > maxProduct || abc/c != ab {
		return 0, false
	}
	return abc, true
}

// nearMultiples names the multiples of k just below and above v ("96 or 120").
func nearMultiples(v, k int) string {
	lo := v / k * k
	hi := lo + k
	if lo == 0 {
		return strconv.Itoa(hi) + " or " + strconv.Itoa(hi+k)
	}
	return strconv.Itoa(lo) + " or " + strconv.Itoa(hi)
}

// globalBatchAdvice explains why grad_accum = global_batch / (world_size ×
// batch_per_device) is not whole, and which values would work.
func globalBatchAdvice(gb, ws, bpd int, src func(field) (value, bool)) string {
	if gb%ws != 0 {
		return fmt.Sprintf("global_batch %d is not a multiple of world_size %d, so the ranks cannot share it evenly; use a global_batch such as %s", gb, ws, nearMultiples(gb, ws))
	}
	perRank := gb / ws
	var divs []string
	for d := 1; d <= perRank && len(divs) < 12; d++ {
		if perRank%d == 0 {
			divs = append(divs, strconv.Itoa(d))
		}
	}
	return fmt.Sprintf("global_batch %d gives %d samples per rank at world_size %d, which batch_per_device %d (%s) does not divide, so grad_accum would not be whole; use batch_per_device %s, or a global_batch such as %s",
		gb, perRank, ws, bpd, origin(src, fBatchPerDevice), strings.Join(divs, ", "), nearMultiples(gb, ws*bpd))
}

// varyingAxes lists the axes that take more than one value across the runs.
func (x *expander) varyingAxes() []string {
	if len(x.runs) < 2 {
		return nil
	}
	var vary [numFields]bool
	first := &x.runs[0]
	for i := 1; i < len(x.runs); i++ {
		rc := &x.runs[i]
		for f := field(0); f < fName; f++ {
			if !vary[f] && !fieldValue(rc, f).equal(fieldValue(first, f)) {
				vary[f] = true
			}
		}
	}
	var out []string
	for _, g := range x.sp.grid {
		if vary[g.d.f] {
			out = append(out, g.d.name)
			vary[g.d.f] = false
		}
	}
	for f := field(0); f < fName; f++ {
		if vary[f] {
			out = append(out, keyDefs[f].name)
		}
	}
	return out
}

// fieldValue reads axis f of rc as a value.
func fieldValue(rc *RunConfig, f field) value {
	v := value{f: f}
	switch f {
	case fNodes:
		v.i = int64(rc.Nodes)
	case fGPUsPerNode:
		v.i = int64(rc.GPUsPerNode)
	case fWorldSize:
		v.i = int64(rc.WorldSize)
	case fBatchPerDevice:
		v.i = int64(rc.BatchPerDevice)
	case fGradAccum:
		v.i = int64(rc.GradAccum)
	case fGlobalBatch:
		v.i = int64(rc.GlobalBatch)
	case fSeqLen:
		v.i = int64(rc.SeqLen)
	case fModel:
		v.s = rc.Model
	case fSharding:
		v.s = rc.Sharding
	case fActivationCheckpointing:
		v.i = b2i(rc.ActivationCheckpointing)
	case fBackwardPrefetch:
		v.s = rc.BackwardPrefetch
	case fForwardPrefetch:
		v.i = b2i(rc.ForwardPrefetch)
	case fCPUOffload:
		v.i = b2i(rc.CPUOffload)
	case fMixedPrecision:
		v.s = rc.MixedPrecision
	case fWrapPolicy:
		v.s = rc.WrapPolicy
	case fCompile:
		v.i = b2i(rc.Compile)
	case fHardware:
		v.s = rc.Hardware
	case fSeed:
		v.i = rc.Seed
	}
	return v
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
