package sweeps

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxRuns bounds the number of grid points a spec may expand to (2^20, a little
// over a million), so a typo such as an extra axis value cannot exhaust memory
// before anything runs.
const MaxRuns = 1 << 20

// maxExcludeChecks bounds exclude entries × grid points, the work of applying
// exclude (a few seconds at most).
const maxExcludeChecks = 1 << 26

// maxProduct bounds the products below (world_size and global_batch are bounded
// far lower, MaxWorldSize and MaxGlobalBatch), so they cannot overflow.
const maxProduct = 1 << 40

// expander turns a checked spec into runs.
type expander struct {
	p    *parsing
	sp   *spec
	base RunConfig
	// baseVals are the axis values every point starts from (top level and base:).
	baseVals []value
	baseMask mask
	runs     []RunConfig
	// hashes holds, per grid run, its ID hash and index in runs; included finds
	// include runs by ID.
	hashes    []idHash
	included  map[string]int
	groups    map[string]int  // search group -> index in runs
	excluded  []int           // points dropped per exclude entry
	seen      map[string]bool // problems reported
	warnings  []string
	notes     []string
	noted     map[nodesNote]bool
	nodeSizes map[string]int
	gridCount int
	// inputs holds InputHashes by model as written, where the script's hash
	// joins the model's.
	inputs map[string]map[string]string

	// stream is Options.Stream for a spec without search: grid points are
	// checked, counted and dropped (runs holds the include entries' runs
	// only), and Plan.All makes them again. point is the grid point being
	// expanded (its place in the odometer); count, first, vary and dynVary
	// are what varyingAxes needs of the runs kept: how many, the first, and
	// which axes (and dynKeys) differ from it.
	stream  bool
	point   int
	count   int
	first   RunConfig
	vary    [numFields]bool
	dynKeys []string
	dynVary []bool
}

// nodesNote is one world size split into nodes on one hardware profile.
type nodesNote struct {
	ws int
	hw string
}

func (p *parsing) expand(sp *spec) *Plan {
	x := &expander{p: p, sp: sp, base: Defaults(), excluded: make([]int, len(sp.exclude)), seen: map[string]bool{},
		noted: map[nodesNote]bool{}, nodeSizes: map[string]int{}}
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
	// IDs hash resolved paths as written (a script's, in the workload key);
	// resolveRuns adds the model's and hardware's after expansion.
	x.base.SpecPaths = sp.writtenOptions
	for _, v := range sp.env {
		v.apply(&x.base)
	}
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
	if len(sp.grid) == 0 && len(sp.include) > 0 {
		// Without a grid, the include entries are the sweep (as in a GitHub Actions
		// matrix); the base point is not a run of its own.
		total = 0
	}
	x.gridCount = total
	if len(sp.exclude) > 0 && total > maxExcludeChecks/len(sp.exclude) {
		// Each point is checked against each entry: a 70 KB spec of 2,000 entries
		// over a million points took a minute.
		p.e.at(sp.excludePos, "exclude has %d entries over a grid of %d points, more than %d checks; narrow the grid, or merge entries (one entry takes several values of an axis: {seed: [1, 2, 3]})",
			len(sp.exclude), total, maxExcludeChecks)
		return nil
	}
	x.stream = p.opts.Stream && sp.search == ""
	if x.stream {
		x.runs = make([]RunConfig, 0, 1+len(sp.include))
		x.dynKeys = sp.dynKeys()
		x.dynVary = make([]bool, len(x.dynKeys))
	} else {
		x.runs = make([]RunConfig, 0, total+len(sp.include))
	}
	x.hashes = make([]idHash, 0, total)
	x.included = map[string]int{}
	x.expandGrid()
	x.checkGridIDs()
	if p.e.failed() {
		return nil
	}
	for i := range sp.include {
		x.expandInclude(&sp.include[i])
	}
	if p.e.failed() {
		return nil
	}
	if x.kept() == 0 {
		what := fmt.Sprintf("all %d points of the grid", total)
		if total == 1 {
			what = "the grid's only point"
		}
		p.e.at(sp.excludePos, "exclude drops %s and there is no include, so there is nothing to run; remove or narrow an exclude entry", what)
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
	if x.stream {
		plan.Runs = nil
		plan.stream = x.streamed()
	}
	plan.Warnings = x.warnings
	plan.Notes = x.notes
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
		if len(grid) == 0 {
			return ""
		}
		parts := make([]string, len(grid))
		for i, g := range grid {
			parts[i] = g.d.name + ": " + g.vals[idx[i]].String()
		}
		return "grid point {" + strings.Join(parts, ", ") + "}"
	}
	for n := 0; n < x.gridCount; n++ {
		// Build the point in its slot of x.runs: a RunConfig is a few hundred bytes,
		// and a million copies of it would be most of the work.
		x.point = n
		x.runs = append(x.runs, x.base)
		rc := &x.runs[len(x.runs)-1]
		for i := range grid {
			grid[i].vals[idx[i]].apply(rc)
		}
		prob := derive(rc, m, x.nodeSize)
		x.noteNodes(rc, m)
		keep := false
		if !x.isExcluded(rc) {
			if prob == nil {
				prob = checkPoint(rc)
			}
			if prob == nil {
				keep = x.keep(rc, pos{})
			} else if !x.report(prob, src, describe, true) {
				return
			}
		}
		if keep && x.stream {
			x.observe(rc)
			keep = false // made again by Plan.All
		}
		if !keep {
			x.runs = x.runs[:len(x.runs)-1]
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
	x.runs = append(x.runs, x.base)
	rc := &x.runs[len(x.runs)-1]
	m := x.baseMask
	for _, v := range in.vals {
		v.apply(rc)
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
	prob := derive(rc, m, x.nodeSize)
	x.noteNodes(rc, m)
	if prob == nil {
		prob = checkPoint(rc)
	}
	if prob != nil {
		x.report(prob, src, func() string { return fmt.Sprintf("include entry at %s", in.pos) }, false)
	}
	if prob != nil || !x.keep(rc, in.pos) {
		x.runs = x.runs[:len(x.runs)-1]
	} else if x.stream {
		x.observe(rc)
	}
}

// noteNodes says, once per world size and hardware, that derive split a world
// size given alone into nodes of the hardware's size (Plan.Notes).
func (x *expander) noteNodes(rc *RunConfig, m mask) {
	if m.has(fNodes) || m.has(fGPUsPerNode) || rc.Nodes < 2 {
		return
	}
	k := nodesNote{rc.WorldSize, rc.Hardware}
	if x.noted[k] {
		return
	}
	x.noted[k] = true
	note := fmt.Sprintf("world_size %d on %s: %d nodes × %d GPUs (a %s node holds %d); give nodes and gpus_per_node to choose otherwise",
		rc.WorldSize, rc.Hardware, rc.Nodes, rc.GPUsPerNode, rc.Hardware, rc.GPUsPerNode)
	x.notes = append(x.notes, note)
}

// nodeSize is Options.GPUsPerNode, asked once per hardware value (a grid may
// have a million points).
func (x *expander) nodeSize(hw string) int {
	if x.p.opts.GPUsPerNode == nil {
		return 0
	}
	n, ok := x.nodeSizes[hw]
	if !ok {
		n = x.p.opts.GPUsPerNode(x.p.hardwarePath(hw))
		x.nodeSizes[hw] = n
	}
	return n
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
	if i := x.excludedBy(rc); i >= 0 {
		x.excluded[i]++
		return true
	}
	return false
}

// excludedBy is the index of the first exclude entry rc matches, or -1.
func (x *expander) excludedBy(rc *RunConfig) int {
	for i := range x.sp.exclude {
		if matchesAll(rc, x.sp.exclude[i].conds) {
			return i
		}
	}
	return -1
}

func matchesAll(rc *RunConfig, conds []excludeCond) bool {
	for _, c := range conds {
		var have value
		if c.f == fDyn {
			var ok bool
			if have, ok = dynValue(rc, c.key); !ok {
				return false
			}
		} else {
			have = fieldValue(rc, c.f)
		}
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

// keep assigns the ID of the run in the last slot of x.runs and says whether it
// stays there as a new run (false: it was merged into an identical earlier point,
// or in a search, into the group's run). from is the include entry's position
// (zero for a grid point).
//
// Grid points are distinct configurations by construction (every point differs
// from the others in a value it gives), so their IDs are only recorded here, and
// checkGridIDs looks for hash collisions once, by sorting: over a million points
// that is several times cheaper than a hash map. Include points, few, are looked up.
func (x *expander) keep(rc *RunConfig, from pos) bool {
	x.inputHashes(rc)
	if x.groups != nil {
		return x.keepSearch(rc)
	}
	idx := len(x.runs) - 1
	h := rc.assignID()
	if from.line == 0 {
		if x.stream {
			idx = x.point // the grid point Plan.All makes again
		}
		x.hashes = append(x.hashes, idHash{h: h, idx: uint32(idx)})
		return true
	}
	var prev *RunConfig
	lo, _ := slices.BinarySearchFunc(x.hashes, h, func(e idHash, h uint64) int { return cmp.Compare(e.h, h) })
	for i := lo; i < len(x.hashes) && x.hashes[i].h == h; i++ {
		if r := x.hashedRun(int(x.hashes[i].idx)); r.ID == rc.ID {
			prev = &r
		}
	}
	if j, ok := x.included[rc.ID]; ok {
		prev = &x.runs[j]
	}
	if prev == nil {
		x.included[rc.ID] = idx
		return true
	}
	var ka, kb [512]byte
	if string(prev.appendTrainingKey(ka[:0])) != string(rc.appendTrainingKey(kb[:0])) {
		x.collision(prev, rc, from)
		return false
	}
	x.warnings = append(x.warnings, from.errorf("this include entry gives the same run as an earlier point (%s); it is merged", rc.ID).Error())
	return false
}

// idHash is a grid run's ID hash and its index in runs.
type idHash struct {
	h   uint64
	idx uint32
}

// checkGridIDs reports grid points whose IDs collide.
func (x *expander) checkGridIDs() {
	slices.SortFunc(x.hashes, func(a, b idHash) int { return cmp.Compare(a.h, b.h) })
	for i := 1; i < len(x.hashes); i++ {
		if x.hashes[i].h != x.hashes[i-1].h {
			continue
		}
		// Equal hashes (about one pair in 30 million over a full grid); compare
		// the IDs, slug included.
		for k := i - 1; k >= 0 && x.hashes[k].h == x.hashes[i].h; k-- {
			a, b := x.hashedRun(int(x.hashes[k].idx)), x.hashedRun(int(x.hashes[i].idx))
			if a.ID == b.ID {
				x.collision(&a, &b, x.sp.namePos)
			}
		}
	}
}

func (x *expander) collision(a, b *RunConfig, at pos) {
	// Two configurations share a slug and 64 bits of SHA-256. Refuse rather than let
	// one overwrite the other's results.
	x.p.e.at(at, "two different runs get the same ID %s (a hash collision: about one chance in 10^19 per pair); change seed or split the sweep, and report this", a.ID)
}

// keepSearch keeps one run per search group: the point with the smallest
// batch_per_device, where the search starts.
func (x *expander) keepSearch(rc *RunConfig) bool {
	rc.SearchGroup = searchGroup(*rc)
	rc.AssignID()
	i, ok := x.groups[rc.SearchGroup]
	if !ok {
		x.groups[rc.SearchGroup] = len(x.runs) - 1
		return true
	}
	if rc.BatchPerDevice < x.runs[i].BatchPerDevice {
		x.runs[i] = *rc
	}
	return false
}

// problem is why a point is invalid: a message about field f of the point.
type problem struct {
	f   field
	msg func(src func(field) (value, bool)) string
	// fix says what to do when f has one value for every run; when f is a grid axis
	// and combo is set, the fix is to exclude the combination.
	fix, combo string
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
	fix := prob.fix
	if inGrid && prob.combo != "" && x.isGridAxis(prob.f) {
		fix = "drop such points with `exclude: [" + prob.combo + "]`"
	}
	if where := point(); where != "" {
		msg += " (" + where + ")"
	}
	if fix != "" {
		msg += "; " + fix
	}
	x.p.e.at(at, "%s", msg)
	return len(x.p.e.list) < maxErrors
}

func (x *expander) isGridAxis(f field) bool {
	for _, g := range x.sp.grid {
		if g.d.f == f {
			return true
		}
	}
	return false
}

// origin says where the value of f in a point came from, for messages.
func origin(src func(field) (value, bool), f field) string {
	if v, ok := src(f); ok {
		return "at " + v.pos.String()
	}
	_, ws := src(fWorldSize)
	_, gpn := src(fGPUsPerNode)
	switch {
	case f == fNodes && ws && gpn:
		return "world_size / gpus_per_node"
	case f == fNodes && ws:
		return "world_size alone means one node"
	case f == fNodes && gpn:
		return "gpus_per_node alone means one node"
	case f == fNodes:
		return "the default"
	case f == fGPUsPerNode || f == fWorldSize || f == fGlobalBatch:
		return "derived"
	}
	_, gb := src(fGlobalBatch)
	_, ga := src(fGradAccum)
	if gb && (f == fGradAccum || f == fBatchPerDevice && ga) {
		return "derived from global_batch"
	}
	return "the default"
}

// derive fills the derived axes: world_size = nodes × gpus_per_node from any two
// (or world_size alone: one node, or whole nodes of nodeSize(hardware) GPUs when
// it is more than one), and global_batch = world_size ×
// batch_per_device × grad_accum, deriving grad_accum (or batch_per_device) when
// global_batch is given.
func derive(rc *RunConfig, m mask, nodeSize func(string) int) *problem {
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
		rc.WorldSize = rc.Nodes * rc.GPUsPerNode // both bounded: no overflow
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
		// World size alone: whole nodes of the hardware's size, so that 64 GPUs of
		// an 8-GPU profile are not read as one 64-GPU NVLink node.
		gpn := 0
		if nodeSize != nil {
			gpn = nodeSize(rc.Hardware)
		}
		switch {
		case gpn < 1 || rc.WorldSize <= gpn:
			rc.Nodes, rc.GPUsPerNode = 1, rc.WorldSize
		case rc.WorldSize%gpn == 0:
			rc.Nodes, rc.GPUsPerNode = rc.WorldSize/gpn, gpn
		default:
			ws, hw := rc.WorldSize, rc.Hardware
			return &problem{f: fWorldSize, msg: func(func(field) (value, bool)) string {
				return fmt.Sprintf("world_size %d is more than one %s node (%d GPUs) and not a whole number of them; use a multiple of %d such as %s, or give nodes and gpus_per_node", ws, hw, gpn, gpn, nearMultiples(ws, gpn))
			}}
		}
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
			prod = maxProduct + 1
		}
		rc.GlobalBatch = prod
	}
	// A derived value obeys the bound of a given one.
	for _, d := range []struct {
		f    field
		v    int
		from field // the value to point at
	}{
		{fWorldSize, rc.WorldSize, fNodes},
		{fBatchPerDevice, rc.BatchPerDevice, fGlobalBatch},
		{fGradAccum, rc.GradAccum, fGlobalBatch},
		{fGlobalBatch, rc.GlobalBatch, fBatchPerDevice},
	} {
		if int64(d.v) > keyDefs[d.f].max {
			return tooLarge(d.from, d.f, d.v)
		}
	}
	return nil
}

// checkPoint refuses combinations that no backend can run.
func checkPoint(rc *RunConfig) *problem {
	if rc.Sharding == HybridShard && rc.Nodes < 2 {
		nodes := rc.Nodes
		return &problem{f: fSharding,
			combo: "{sharding: hybrid_shard, nodes: 1}",
			fix:   "use full_shard on one node, or give nodes >= 2 (e.g. nodes: 2 with gpus_per_node: 8)",
			msg: func(src func(field) (value, bool)) string {
				return fmt.Sprintf("hybrid_shard needs nodes >= 2 (it shards inside a node and replicates across nodes), but this point has nodes %d (%s)", nodes, origin(src, fNodes))
			}}
	}
	return checkCheckpoint(rc)
}

// tooLarge is a derived value past its bound, reported at the value of f.
func tooLarge(f, derived field, v int) *problem {
	d := keyDefs[derived]
	return &problem{f: f, msg: func(func(field) (value, bool)) string {
		if v > maxProduct {
			return fmt.Sprintf("%s would be more than %d, past its bound %d; use smaller values", d.name, int64(maxProduct), d.max)
		}
		return fmt.Sprintf("%s would be %d, more than %d; use smaller values", d.name, v, d.max)
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
	var vary [numFields]bool
	var dynVaries func(string) bool
	if x.stream {
		if x.count < 2 {
			return nil
		}
		vary = x.vary
		dynVaries = func(k string) bool { return x.dynVary[slices.Index(x.dynKeys, k)] }
	} else {
		if len(x.runs) < 2 {
			return nil
		}
		first := &x.runs[0]
		for i := 1; i < len(x.runs); i++ {
			markDifferent(&vary, first, &x.runs[i])
		}
		dynVaries = func(k string) bool { return dynVariesIn(x.runs, k) }
	}
	var out []string
	dyn := x.sp.dynKeys()
	for _, g := range x.sp.grid {
		if g.d.f == fDyn {
			if dynVaries(g.d.name) {
				out = append(out, g.d.name)
			}
			continue
		}
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
	for _, k := range dyn {
		if !slices.Contains(out, k) && dynVaries(k) {
			out = append(out, k)
		}
	}
	return out
}

// markDifferent sets vary[f] for every axis f where a and b differ. It compares the
// fields directly: it runs once per run of a grid that may have a million.
func markDifferent(vary *[numFields]bool, a, b *RunConfig) {
	vary[fNodes] = vary[fNodes] || a.Nodes != b.Nodes
	vary[fGPUsPerNode] = vary[fGPUsPerNode] || a.GPUsPerNode != b.GPUsPerNode
	vary[fWorldSize] = vary[fWorldSize] || a.WorldSize != b.WorldSize
	vary[fBatchPerDevice] = vary[fBatchPerDevice] || a.BatchPerDevice != b.BatchPerDevice
	vary[fGradAccum] = vary[fGradAccum] || a.GradAccum != b.GradAccum
	vary[fGlobalBatch] = vary[fGlobalBatch] || a.GlobalBatch != b.GlobalBatch
	vary[fSeqLen] = vary[fSeqLen] || a.SeqLen != b.SeqLen
	vary[fModel] = vary[fModel] || a.Model != b.Model
	vary[fSharding] = vary[fSharding] || a.Sharding != b.Sharding
	vary[fActivationCheckpointing] = vary[fActivationCheckpointing] || a.ActivationCheckpointing != b.ActivationCheckpointing
	vary[fBackwardPrefetch] = vary[fBackwardPrefetch] || a.BackwardPrefetch != b.BackwardPrefetch
	vary[fForwardPrefetch] = vary[fForwardPrefetch] || a.ForwardPrefetch != b.ForwardPrefetch
	vary[fCPUOffload] = vary[fCPUOffload] || a.CPUOffload != b.CPUOffload
	vary[fMixedPrecision] = vary[fMixedPrecision] || a.MixedPrecision != b.MixedPrecision
	vary[fWrapPolicy] = vary[fWrapPolicy] || a.WrapPolicy != b.WrapPolicy
	vary[fCompile] = vary[fCompile] || a.Compile != b.Compile
	vary[fHardware] = vary[fHardware] || a.Hardware != b.Hardware
	vary[fSeed] = vary[fSeed] || a.Seed != b.Seed
	vary[fCheckpoint] = vary[fCheckpoint] || a.Checkpoint != b.Checkpoint
	vary[fCheckpointEvery] = vary[fCheckpointEvery] || a.CheckpointEvery != b.CheckpointEvery
	vary[fResumeCheck] = vary[fResumeCheck] || a.ResumeCheck != b.ResumeCheck
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
	case fCheckpoint:
		v.s = rc.Checkpoint
	case fCheckpointEvery:
		v.i = int64(rc.CheckpointEvery)
	case fResumeCheck:
		v.i = b2i(rc.ResumeCheck)
	}
	return v
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
