package plot

import (
	"fmt"
	"image/color"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/fsdpbench/fsdpbench/results"
)

var (
	gray     = color.RGBA{R: 120, G: 120, B: 120, A: 255}
	red      = color.RGBA{R: 200, G: 30, B: 30, A: 255}
	green    = color.RGBA{R: 30, G: 140, B: 60, A: 255}
	dashes   = []vg.Length{vg.Points(5), vg.Points(3)}
	fitsNot  = "did not fit: its peak (predicted, or when it stopped)"
	idealEff = "ideal scaling (100%)"
)

func okRuns(runs []results.Run) []results.Run {
	var out []results.Run
	for _, r := range runs {
		if r.Metrics.Status == results.StatusOK {
			out = append(out, r)
		}
	}
	return out
}

// scalingAxes change with the world size; the scaling chart puts them on its x axis.
var scalingAxes = []string{"world_size", "nodes", "gpus_per_node", "grad_accum", "global_batch"}

// groupRuns splits runs into labelled series; xOf gives a run's x. When two runs of a
// series share an x, the axes in fallback (that were excluded) go back into the
// labels so no point hides another.
func groupRuns(runs []results.Run, exclude, fallback []string, xOf func(*results.Run) float64) (map[string][]*results.Run, []string) {
	try := func(excl []string) (map[string][]*results.Run, bool) {
		g := newGrouping(runs, excl...)
		out := map[string][]*results.Run{}
		seen := map[string]bool{}
		clash := false
		for i := range runs {
			r := &runs[i]
			l := g.label(r)
			k := fmt.Sprintf("%s|%g", l, xOf(r))
			clash = clash || seen[k]
			seen[k] = true
			out[l] = append(out[l], r)
		}
		return out, clash
	}
	groups, clash := try(exclude)
	if clash && len(fallback) > 0 {
		var excl []string
		for _, e := range exclude {
			keep := true
			for _, f := range fallback {
				keep = keep && e != f
			}
			if keep {
				excl = append(excl, e)
			}
		}
		groups, _ = try(excl)
	}
	labels := make([]string, 0, len(groups))
	for l := range groups {
		labels = append(labels, l)
	}
	seriesOrder(labels)
	for _, l := range labels {
		sort.SliceStable(groups[l], func(i, j int) bool { return xOf(groups[l][i]) < xOf(groups[l][j]) })
	}
	return groups, labels
}

// Scaling draws tokens/s per rank and scaling efficiency against the world size,
// one line per strategy (and per other axis that varies). ErrNothingToPlot when
// fewer than two world sizes ran ok.
func Scaling(runs []results.Run) (*Figure, error) {
	ok := okRuns(runs)
	var have []results.Run
	for _, r := range ok {
		if r.Metrics.TokensPerSPerRank != nil {
			have = append(have, r)
		}
	}
	ws := distinct(have, func(r *results.Run) int { return r.Config.WorldSize })
	if len(ws) < 2 {
		return nil, fmt.Errorf("scaling: %w (needs ok runs at two or more world sizes)", ErrNothingToPlot)
	}
	xOf := func(r *results.Run) float64 { return float64(r.Config.WorldSize) }
	groups, labels := groupRuns(have, scalingAxes, []string{"nodes", "gpus_per_node"}, xOf)
	ctx := context(runs)
	tp := newPanel(titled("Throughput per rank", ctx), "world size (ranks)", "tokens/s per rank")
	eff := newPanel(titled("Scaling efficiency", ctx), "world size (ranks)", "scaling efficiency (% of smallest world size)")
	log2Axis(tp, append([]float64(nil), ws...))
	log2Axis(eff, append([]float64(nil), ws...))
	fig := newFigure("scaling", [][]*plot.Plot{{tp, eff}})

	ideal, err := plotter.NewLine(plotter.XYs{{X: ws[0], Y: 100}, {X: ws[len(ws)-1], Y: 100}})
	if err != nil {
		return nil, err
	}
	ideal.Color, ideal.Dashes, ideal.Width = gray, dashes, vg.Points(1.2)
	eff.Add(ideal)
	maxEff := 100.0
	styles := seriesStyles(labels, func(l string) string { return groups[l][0].Config.Sharding })
	for _, l := range labels {
		st := styles[l]
		var a, b plotter.XYs
		for _, r := range groups[l] {
			a = append(a, plotter.XY{X: xOf(r), Y: *r.Metrics.TokensPerSPerRank})
			if e := r.Derived.ScalingEfficiency; e != nil {
				b = append(b, plotter.XY{X: xOf(r), Y: *e * 100})
				maxEff = math.Max(maxEff, *e*100)
			}
		}
		ln, sc, err := line(a, st)
		if err != nil {
			return nil, err
		}
		tp.Add(ln, sc)
		// A series at one world size is its own baseline: 100% says nothing.
		if len(b) > 1 {
			ln2, sc2, err := line(b, st)
			if err != nil {
				return nil, err
			}
			eff.Add(ln2, sc2)
		}
		fig.addSeries(l, ln, sc)
	}
	fig.addSeries(idealEff, ideal)
	tp.Y.Min, eff.Y.Min = 0, 0
	eff.Y.Max = maxEff * 1.08
	tp.Y.Max *= 1.05
	return fig, nil
}

// memCategory is one x position of the memory chart: a world size (and node count
// when runs of one world size differ in it).
type memCategory struct{ ws, nodes int }

func (c memCategory) label(multiNode bool) string {
	if multiNode && c.nodes > 1 {
		// On a line of its own: side by side, "16 (2 nodes)" labels of
		// neighbouring bars run into each other.
		return fmt.Sprintf("%d\n%d nodes", c.ws, c.nodes)
	}
	return fmt.Sprint(c.ws)
}

// maxFacets bounds the columns of the memory chart; the batch chart covers sweeps
// whose other axes vary more.
const maxFacets = 4

// Memory draws peak allocated and peak reserved memory per rank as bars, grouped by
// world size with one bar per strategy; one column of panels per combination of the
// other axes that vary (up to maxFacets). Runs that did not fit are marked on their
// bar's place with their status.
func Memory(runs []results.Run) (*Figure, error) {
	type metric struct {
		axis, title string
		get         func(*results.Metrics) *int64
	}
	metrics := []metric{
		{"peak allocated per rank", "Peak allocated memory", func(m *results.Metrics) *int64 { return m.PeakMemAllocatedBytes }},
		{"peak reserved per rank", "Peak reserved memory", func(m *results.Metrics) *int64 { return m.PeakMemReservedBytes }},
	}
	var rows []metric
	for _, m := range metrics {
		for i := range runs {
			if runs[i].Metrics.Status == results.StatusOK && m.get(&runs[i].Metrics) != nil {
				rows = append(rows, m)
				break
			}
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("memory: %w (no ok run reports peak memory)", ErrNothingToPlot)
	}
	facetG := newGrouping(runs, append(append([]string{"sharding"}, scalingAxes...), "sweep")...)
	facetOf := func(r *results.Run) string {
		if len(facetG.axes) == 0 {
			return ""
		}
		return facetG.label(r)
	}
	var facets []string
	seenF := map[string]bool{}
	for i := range runs {
		if f := facetOf(&runs[i]); !seenF[f] {
			seenF[f] = true
			facets = append(facets, f)
		}
	}
	// Panels in reading order (batch 2 before batch 16); when there are more
	// than fit, the ones with a figure to draw win over all-infeasible ones.
	hasData := map[string]bool{}
	for i := range runs {
		if runs[i].Metrics.Status == results.StatusOK {
			for _, m := range rows {
				hasData[facetOf(&runs[i])] = hasData[facetOf(&runs[i])] || m.get(&runs[i].Metrics) != nil
			}
		}
	}
	sort.SliceStable(facets, func(i, j int) bool { return naturalLess(facets[i], facets[j]) })
	note := ""
	if len(facets) > maxFacets {
		sort.SliceStable(facets, func(i, j int) bool { return hasData[facets[i]] && !hasData[facets[j]] })
		note = fmt.Sprintf(" (%d of %d)", maxFacets, len(facets))
		facets = facets[:maxFacets]
		sort.SliceStable(facets, func(i, j int) bool { return naturalLess(facets[i], facets[j]) })
	}

	var cats []memCategory
	seenC := map[memCategory]bool{}
	nodesAt := map[int]map[int]bool{}
	var strategies []string
	seenS := map[string]bool{}
	for i := range runs {
		c := memCategory{runs[i].Config.WorldSize, runs[i].Config.Nodes}
		if !seenC[c] {
			seenC[c] = true
			cats = append(cats, c)
		}
		if nodesAt[c.ws] == nil {
			nodesAt[c.ws] = map[int]bool{}
		}
		nodesAt[c.ws][c.nodes] = true
		if s := runs[i].Config.Sharding; !seenS[s] {
			seenS[s] = true
			strategies = append(strategies, s)
		}
	}
	sort.Slice(cats, func(i, j int) bool {
		if cats[i].ws != cats[j].ws {
			return cats[i].ws < cats[j].ws
		}
		return cats[i].nodes < cats[j].nodes
	})
	multiNode := false
	for _, c := range cats {
		multiNode = multiNode || c.nodes > 1
	}
	catIndex := map[memCategory]int{}
	names := make([]string, len(cats))
	for i, c := range cats {
		catIndex[c] = i
		names[i] = c.label(multiNode)
	}
	seriesOrder(strategies)

	var device *int64
	for i := range runs {
		if d := runs[i].Metrics.DeviceMemBytes; d != nil {
			device = d
			break
		}
	}
	ctx := context(runs)
	panels := make([][]*plot.Plot, len(rows))
	fig := newFigure("memory", panels)
	plotW := panelW - 1.1*vg.Inch
	barW := plotW / vg.Length(len(cats)*len(strategies)) * 0.8
	for ri, m := range rows {
		top := 0.0
		for i := range runs {
			if v := m.get(&runs[i].Metrics); v != nil && runs[i].Metrics.Status == results.StatusOK {
				top = math.Max(top, float64(*v))
			}
		}
		u := results.ByteUnitFor(top)
		scale, unit := u.Scale, u.Name
		// The device's capacity is drawn when it is in the range of the bars; a line
		// far above them would squash them flat.
		showDevice := device != nil && float64(*device) <= 3*top
		for _, facet := range facets {
			title := m.title
			if facet != "" {
				title += ": " + facet
			}
			if ri == 0 && note != "" {
				title += note
			}
			p := newBarPanel(titled(title, ctx), "world size (ranks)", m.axis+" ("+unit+")", true)
			p.NominalX(names...)
			p.X.Min, p.X.Max = -0.5, float64(len(cats))-0.5
			for si, s := range strategies {
				vals := make(plotter.Values, len(cats))
				var marks plotter.XYs
				var texts []string
				for i := range runs {
					r := &runs[i]
					if r.Config.Sharding != s || facetOf(r) != facet {
						continue
					}
					k := catIndex[memCategory{r.Config.WorldSize, r.Config.Nodes}]
					if r.Metrics.Status != results.StatusOK {
						marks = append(marks, plotter.XY{X: float64(k), Y: 0})
						texts = append(texts, " "+string(r.Metrics.Status))
						continue
					}
					if v := m.get(&r.Metrics); v != nil {
						vals[k] = float64(*v) / scale
					}
				}
				bars, err := plotter.NewBarChart(vals, barW)
				if err != nil {
					return nil, err
				}
				st := styleOf(si)
				bars.Color, bars.LineStyle.Width = st.color, 0
				bars.Offset = barW * (vg.Length(si) - vg.Length(len(strategies)-1)/2)
				p.Add(bars)
				if len(marks) > 0 {
					lb, err := plotter.NewLabels(plotter.XYLabels{XYs: marks, Labels: texts})
					if err != nil {
						return nil, err
					}
					for i := range lb.TextStyle {
						lb.TextStyle[i].Rotation = math.Pi / 2
						lb.TextStyle[i].Color = red
						lb.TextStyle[i].Font.Size = 9
						lb.TextStyle[i].XAlign = draw.XCenter
					}
					lb.Offset = vg.Point{X: bars.Offset}
					p.Add(lb)
				}
				fig.addSeries(s, bars)
			}
			if showDevice {
				dl, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: float64(*device) / scale}, {X: float64(len(cats)) - 0.5, Y: float64(*device) / scale}})
				if err != nil {
					return nil, err
				}
				dl.Color, dl.Dashes, dl.Width = red, dashes, vg.Points(1.2)
				p.Add(dl)
				fig.addSeries("device memory ("+results.FormatBytes(float64(*device))+")", dl)
			}
			p.Y.Min = 0
			p.Y.Max *= 1.08
			panels[ri] = append(panels[ri], p)
		}
	}
	fig.Panels = panels
	fig.Width = panelW * vg.Length(len(facets))
	return fig, nil
}

// batchAxes change with the batch; the batch chart puts them on its x axis.
var batchAxes = []string{"batch_per_device", "global_batch", "grad_accum"}

// BatchSearch draws throughput per rank and peak reserved memory against the batch
// per device, one line per checkpointing setting (and other axes that vary), with
// the device's memory as a line and the runs that did not fit marked at their peak.
// ErrNothingToPlot when fewer than two batch sizes ran ok.
func BatchSearch(runs []results.Run) (*Figure, error) {
	ok := okRuns(runs)
	batches := distinct(ok, func(r *results.Run) int { return r.Config.BatchPerDevice })
	if len(batches) < 2 {
		return nil, fmt.Errorf("batch: %w (needs ok runs at two or more batch sizes)", ErrNothingToPlot)
	}
	all := distinct(runs, func(r *results.Run) int { return r.Config.BatchPerDevice })
	xOf := func(r *results.Run) float64 { return float64(r.Config.BatchPerDevice) }
	ctx := context(runs)
	tp := newPanel(titled("Throughput vs batch", ctx), "batch per device (samples)", "tokens/s per rank")
	mem := newPanel(titled("Peak reserved memory vs batch", ctx), "batch per device (samples)", "peak reserved memory per rank (GiB)")
	log2Axis(tp, append([]float64(nil), all...))
	log2Axis(mem, append([]float64(nil), all...))
	fig := newFigure("batch", [][]*plot.Plot{{tp, mem}})

	groups, labels := groupRuns(runs, batchAxes, nil, xOf)
	top := 0.0
	for i := range runs {
		if v := runs[i].Metrics.PeakMemReservedBytes; v != nil {
			top = math.Max(top, float64(*v))
		}
	}
	u := results.ByteUnitFor(top)
	scale, unit := u.Scale, u.Name
	mem.Y.Label.Text = "peak reserved per rank (" + unit + ")"
	var over plotter.XYs
	styles := seriesStyles(labels, func(l string) string { return groups[l][0].Config.Sharding })
	for _, l := range labels {
		st := styles[l]
		var a, b plotter.XYs
		for _, r := range groups[l] {
			if r.Metrics.Status != results.StatusOK {
				if v := r.Metrics.PeakMemReservedBytes; v != nil {
					over = append(over, plotter.XY{X: xOf(r), Y: float64(*v) / scale})
				}
				continue
			}
			if v := r.Metrics.TokensPerSPerRank; v != nil {
				a = append(a, plotter.XY{X: xOf(r), Y: *v})
			}
			if v := r.Metrics.PeakMemReservedBytes; v != nil {
				b = append(b, plotter.XY{X: xOf(r), Y: float64(*v) / scale})
			}
		}
		if len(a) == 0 && len(b) == 0 {
			continue
		}
		var thumbs []plot.Thumbnailer
		for _, pair := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{tp, a}, {mem, b}} {
			if len(pair.xys) == 0 {
				continue
			}
			ln, sc, err := line(pair.xys, st)
			if err != nil {
				return nil, err
			}
			pair.p.Add(ln, sc)
			if thumbs == nil {
				thumbs = []plot.Thumbnailer{ln, sc}
			}
		}
		fig.addSeries(l, thumbs...)
	}
	if len(over) > 0 {
		sc, err := plotter.NewScatter(over)
		if err != nil {
			return nil, err
		}
		sc.Shape, sc.Color, sc.Radius = draw.CrossGlyph{}, color.Black, vg.Points(5)
		mem.Add(sc)
		fig.addSeries(fitsNot, sc)
	}
	var device *int64
	for i := range runs {
		if d := runs[i].Metrics.DeviceMemBytes; d != nil {
			device = d
			break
		}
	}
	if device != nil && float64(*device) <= 3*top {
		dl, err := plotter.NewLine(plotter.XYs{{X: all[0], Y: float64(*device) / scale}, {X: all[len(all)-1], Y: float64(*device) / scale}})
		if err != nil {
			return nil, err
		}
		dl.Color, dl.Dashes, dl.Width = red, dashes, vg.Points(1.2)
		mem.Add(dl)
		fig.addSeries("device memory ("+results.FormatBytes(float64(*device))+")", dl)
	}
	tp.Y.Min, mem.Y.Min = 0, 0
	tp.Y.Max *= 1.05
	mem.Y.Max *= 1.05
	return fig, nil
}

// regressionMetrics are the figures the regression chart shows, with the direction
// that is bad.
var regressionMetrics = []struct {
	name, title string
	drop        bool // a drop is a regression (throughput); else a rise is (memory)
}{
	{"tokens_per_s_per_rank", "Throughput per rank vs baseline", true},
	{"peak_mem_reserved_bytes", "Peak reserved memory vs baseline", false},
}

// predictedSides says which sides of a comparison hold the analytic model's
// figures, for the regression chart's titles ("" when both are measured): a
// change between predictions is a change of the model, not of the trainer.
func predictedSides(cmp *results.Comparison) string {
	base, cur := false, false
	for _, row := range cmp.Rows {
		base = base || row.BaselinePredicted
		cur = cur || row.CurrentPredicted
	}
	switch {
	case base && cur:
		return "both sides predicted by the analytic model, not measured"
	case base:
		return "baseline predicted by the analytic model, not measured"
	case cur:
		return "current figures predicted by the analytic model, not measured"
	}
	return ""
}

// Regression draws each run's change against the baseline as horizontal bars, one
// panel per metric (throughput per rank, peak reserved memory): red beyond the
// rule's limit in the bad direction, green beyond it in the good one, gray within;
// the limits are dashed lines. Runs on one side only, or not ok, are labelled.
// rules give the limits (drop rules for throughput, rise rules for memory);
// without one, 5% and 3%.
func Regression(cmp *results.Comparison, rules []results.Rule) (*Figure, error) {
	limits := map[string]float64{"tokens_per_s_per_rank": 0.05, "peak_mem_reserved_bytes": 0.03}
	for _, r := range rules {
		if r.Kind == results.RuleDrop || r.Kind == results.RuleRise {
			limits[r.Metric] = r.Limit
		}
	}
	idx := map[string]int{}
	for j, m := range cmp.Metrics {
		idx[m] = j
	}
	n := len(cmp.Rows)
	if n == 0 {
		return nil, fmt.Errorf("regression: %w (no runs in either set)", ErrNothingToPlot)
	}
	names := make([]string, n)
	for i, row := range cmp.Rows {
		names[n-1-i] = slug(row.Run) // the first run on top
	}
	var panels [][]*plot.Plot
	fig := newFigure("regression", nil)
	ctx := predictedSides(cmp)
	for _, m := range regressionMetrics {
		j, ok := idx[m.name]
		if !ok {
			continue
		}
		limit := limits[m.name] * 100
		p := newBarPanel(titled(m.title, ctx), "change vs baseline (%)", "", false)
		p.NominalY(names...)
		p.Y.Min, p.Y.Max = -0.5, float64(n)-0.5
		p.Y.Tick.Label.Font.Size = 9
		maxAbs := limit * 1.5
		var notes plotter.XYs
		var texts []string
		var aligns []draw.XAlignment
		for i, row := range cmp.Rows {
			y := float64(n - 1 - i)
			d := row.Deltas[j]
			if d.Change == nil {
				notes = append(notes, plotter.XY{X: 0, Y: y})
				texts = append(texts, " "+statusNote(row))
				aligns = append(aligns, draw.XLeft)
				continue
			}
			v := *d.Change * 100
			maxAbs = math.Max(maxAbs, math.Abs(v)*1.25) // room for the label
			c, series := gray, "within the limit"
			bad := (m.drop && v < -limit) || (!m.drop && v > limit)
			good := (m.drop && v > limit) || (!m.drop && v < -limit)
			switch {
			case bad && (!d.Backed || d.Significant):
				c, series = red, "regression beyond the limit"
			case good && (!d.Backed || d.Significant):
				c, series = green, "improvement beyond the limit"
			}
			// The figure at the bar's end, so no one has to read it off the axis.
			notes = append(notes, plotter.XY{X: v, Y: y})
			texts = append(texts, fmt.Sprintf(" %+.1f%% ", v))
			aligns = append(aligns, map[bool]draw.XAlignment{true: draw.XRight, false: draw.XLeft}[v < 0])
			bar, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(10))
			if err != nil {
				return nil, err
			}
			bar.Horizontal, bar.XMin, bar.Color, bar.LineStyle.Width = true, y, c, 0
			p.Add(bar)
			fig.addSeries(series, bar)
		}
		if len(notes) > 0 {
			lb, err := plotter.NewLabels(plotter.XYLabels{XYs: notes, Labels: texts})
			if err != nil {
				return nil, err
			}
			for i := range lb.TextStyle {
				lb.TextStyle[i].Font.Size = 9
				lb.TextStyle[i].XAlign, lb.TextStyle[i].YAlign = aligns[i], draw.YCenter
				if !strings.HasSuffix(texts[i], "% ") {
					lb.TextStyle[i].Color = red // a status, not a change
				}
			}
			p.Add(lb)
		}
		edge := -limit
		if !m.drop {
			edge = limit
		}
		ll, err := plotter.NewLine(plotter.XYs{{X: edge, Y: -0.5}, {X: edge, Y: float64(n) - 0.5}})
		if err != nil {
			return nil, err
		}
		ll.Color, ll.Dashes, ll.Width = red, dashes, vg.Points(1.2)
		zero, err := plotter.NewLine(plotter.XYs{{X: 0, Y: -0.5}, {X: 0, Y: float64(n) - 0.5}})
		if err != nil {
			return nil, err
		}
		zero.Color, zero.Width = gray, vg.Points(0.8)
		p.Add(zero, ll)
		fig.addSeries("gate limit", ll)
		p.X.Min, p.X.Max = -maxAbs*1.15, maxAbs*1.15
		panels = append(panels, []*plot.Plot{p})
	}
	if len(panels) == 0 {
		return nil, fmt.Errorf("regression: %w (neither throughput per rank nor peak reserved memory compared)", ErrNothingToPlot)
	}
	fig.Panels = panels
	fig.Width = panelW + 1.5*vg.Inch // room for run names
	fig.Height = vg.Length(len(panels)) * max(panelH, vg.Length(n)*0.28*vg.Inch+1.2*vg.Inch)
	return fig, nil
}

// slug drops the hash from a run ID: ws8-bs4-full_shard-ac0-pre-bcf429385997cf48
// -> ws8-bs4-full_shard-ac0-pre (the slug alone names the point in one sweep).
// Legacy IDs carry 8 hex digits, current ones 16.
func slug(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 && (len(id)-i == 9 || len(id)-i == 17) {
		return id[:i]
	}
	return id
}

func statusNote(row results.ComparisonRow) string {
	switch {
	case row.BaselineStatus == "":
		return "new"
	case row.CurrentStatus == "":
		return "missing"
	case row.BaselineStatus == results.StatusOK && row.CurrentStatus != results.StatusOK:
		return "was ok, now " + string(row.CurrentStatus)
	case row.BaselineStatus != results.StatusOK && row.CurrentStatus == results.StatusOK:
		return "now ok, was " + string(row.BaselineStatus)
	case row.CurrentStatus != results.StatusOK:
		return string(row.CurrentStatus) + " in both"
	}
	return "unknown"
}

// trendNight is one night reduced to what the trend draws: per sharding
// strategy, the sum of the metric's logarithms and their count over ok runs.
type trendNight struct {
	night    results.Night
	sum, cnt map[string]float64
}

// reduceNight reduces a night's runs to the trend's figures for col.
func reduceNight(n results.Night, runs []results.Run, col results.Column) trendNight {
	t := trendNight{night: n, sum: map[string]float64{}, cnt: map[string]float64{}}
	for i := range runs {
		r := &runs[i]
		if r.Metrics.Status != results.StatusOK {
			continue
		}
		v, ok := col.Value(r).(float64)
		if iv, isInt := col.Value(r).(int64); isInt {
			v, ok = float64(iv), true
		}
		if !ok || v <= 0 {
			continue
		}
		t.sum[r.Config.Sharding] += math.Log(v)
		t.cnt[r.Config.Sharding]++
	}
	return t
}

// Trend draws metricName over nights: one line per sharding strategy, the
// geometric mean over the night's ok runs, failed nights ringed.
func Trend(nights []results.NightRuns, metricName string) (*Figure, error) {
	col, err := results.LookupColumn(metricName, results.KindMetric, results.KindDerived)
	if err != nil {
		return nil, fmt.Errorf("trend: %w", err)
	}
	reduced := make([]trendNight, len(nights))
	for i, n := range nights {
		reduced[i] = reduceNight(n.Night, n.Runs, col)
	}
	return drawTrend(reduced, col, metricName)
}

// TrendHistory is Trend over the nights of a history directory, read one night
// at a time and reduced at once: memory stays that of one night's runs however
// many nights are stored (3,000 nights held every run and took 1.3 GB).
func TrendHistory(history, metricName string) (*Figure, error) {
	col, err := results.LookupColumn(metricName, results.KindMetric, results.KindDerived)
	if err != nil {
		return nil, fmt.Errorf("trend: %w", err)
	}
	nights, err := results.Nights(history)
	if err != nil {
		return nil, err
	}
	if len(nights) == 0 {
		return nil, fmt.Errorf("history %s: no nights stored (`fsdpbench gate --history %s` stores one per run)", history, history)
	}
	reduced := make([]trendNight, 0, len(nights))
	for _, n := range nights {
		runs, err := results.Load(n.Dir)
		if err != nil {
			return nil, fmt.Errorf("history night %s: %w", n.Name, err)
		}
		reduced = append(reduced, reduceNight(n, runs, col))
	}
	return drawTrend(reduced, col, metricName)
}

// maxTrendTicks bounds the labelled nights on the trend's x axis, and
// maxTrendWidth the chart's width: a tick per night and 0.6 inch each made a
// 3,000-night chart 1,800 inches wide.
const (
	maxTrendTicks = 60
	maxTrendWidth = 40 * vg.Inch
)

func drawTrend(nights []trendNight, col results.Column, metricName string) (*Figure, error) {
	if len(nights) == 0 {
		return nil, fmt.Errorf("trend: %w (no nights)", ErrNothingToPlot)
	}
	scale, unit := 1.0, col.Header
	bytes := col.Unit == results.UnitBytes || col.Unit == results.UnitBytesMiB
	if col.Unit == results.UnitFraction {
		scale = 100
	}
	byStrategy := map[string]plotter.XYs{}
	// Failed and inconclusive nights are marked apart: an inconclusive night
	// asked to measure again, it did not find a regression (issue 37: it was
	// ringed as "gate failed that night").
	var failed, unsure plotter.XYs
	ticks := make([]string, len(nights))
	every := (len(nights) + maxTrendTicks - 1) / maxTrendTicks
	for x, n := range nights {
		commit := n.night.Commit
		if len(commit) > 7 {
			commit = commit[:7]
		}
		if n.night.Seq > 1 {
			// A second night of one date and commit: told apart on the axis.
			commit += fmt.Sprintf(" #%d", n.night.Seq)
		}
		if x%every == 0 || x == len(nights)-1 {
			ticks[x] = n.night.Date[min(5, len(n.night.Date)):] + "\n" + commit
		}
		for s, c := range n.cnt {
			y := math.Exp(n.sum[s]/c) * scale
			byStrategy[s] = append(byStrategy[s], plotter.XY{X: float64(x), Y: y})
			switch {
			case n.night.Passed:
			case n.night.Verdict == results.OutcomeInconclusive:
				unsure = append(unsure, plotter.XY{X: float64(x), Y: y})
			default:
				failed = append(failed, plotter.XY{X: float64(x), Y: y})
			}
		}
	}
	if len(byStrategy) == 0 {
		return nil, fmt.Errorf("trend: %w (no night has %s)", ErrNothingToPlot, metricName)
	}
	if bytes {
		// In the unit that suits the largest geomean drawn, as every table.
		top := 0.0
		for _, xys := range byStrategy {
			for _, xy := range xys {
				top = math.Max(top, xy.Y)
			}
		}
		u := results.ByteUnitFor(top)
		unit = col.Header + " (" + u.Name + ")"
		for _, xys := range byStrategy {
			for i := range xys {
				xys[i].Y /= u.Scale
			}
		}
		for i := range failed {
			failed[i].Y /= u.Scale
		}
		for i := range unsure {
			unsure[i].Y /= u.Scale
		}
	}
	p := newPanel(fmt.Sprintf("%s over nights", col.Header), "night (date, commit)", unit+", geomean over runs")
	p.NominalX(ticks...)
	fig := newFigure("trend", [][]*plot.Plot{{p}})
	fig.Width = min(maxTrendWidth, max(panelW, vg.Length(len(nights))*0.6*vg.Inch+1.5*vg.Inch))
	var strategies []string
	for s := range byStrategy {
		strategies = append(strategies, s)
	}
	seriesOrder(strategies)
	for i, s := range strategies {
		ln, sc, err := line(byStrategy[s], styleOf(i))
		if err != nil {
			return nil, err
		}
		p.Add(ln, sc)
		fig.addSeries(s, ln, sc)
	}
	if len(failed) > 0 {
		sc, err := plotter.NewScatter(failed)
		if err != nil {
			return nil, err
		}
		sc.Shape, sc.Color, sc.Radius = draw.RingGlyph{}, red, vg.Points(7)
		p.Add(sc)
		fig.addSeries("gate failed that night", sc)
	}
	if len(unsure) > 0 {
		sc, err := plotter.NewScatter(unsure)
		if err != nil {
			return nil, err
		}
		sc.Shape, sc.Color, sc.Radius = draw.SquareGlyph{}, color.RGBA{R: 0xe6, G: 0x9f, A: 0xff}, vg.Points(7)
		p.Add(sc)
		fig.addSeries("gate inconclusive that night", sc)
	}
	p.Y.Min = 0
	p.Y.Max *= 1.08
	return fig, nil
}
