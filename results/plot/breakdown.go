package plot

import (
	"fmt"
	"image/color"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/fsdpbench/fsdpbench/results"
)

// maxBreakdownBars bounds the bars of the breakdown chart: beyond it the labels
// no longer read (a sim sweep of hundreds of points); the first ones, in the
// axes' order, are drawn and the title says how many of how many.
const maxBreakdownBars = 40

// breakdownBarH is the height each bar adds to the chart.
const breakdownBarH = 0.32 * vg.Inch

// breakdownParts are the stacked segments, in drawing order from the left:
// they add up to the step (StepBreakdown's identity).
var breakdownParts = []struct {
	name  string
	color color.Color
	get   func(*results.StepBreakdown) float64
}{
	{"compute", color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff}, func(b *results.StepBreakdown) float64 { return b.ComputeS }},
	{"exposed communication", color.RGBA{R: 0xdd, G: 0x55, B: 0x3b, A: 0xff}, func(b *results.StepBreakdown) float64 { return b.ExposedCommS }},
	{"other (host, data, gaps)", color.RGBA{R: 0xaa, G: 0xaa, B: 0xaa, A: 0xff}, func(b *results.StepBreakdown) float64 { return b.OtherS }},
}

// Breakdown draws where each run's step went (issue 27): one horizontal bar per
// ok run with a step breakdown, stacked compute / exposed communication /
// other, labelled with the axes that vary across those runs. The bar's length
// is the breakdown's step; the figure grows with the runs (up to
// maxBreakdownBars). ErrNothingToPlot when no ok run has a breakdown.
func Breakdown(runs []results.Run) (*Figure, error) {
	bb, err := breakdownBars(runs)
	if err != nil {
		return nil, err
	}
	n := len(bb.names)
	p := newBarPanel(titled("Step time breakdown"+bb.note, context(bb.runs)), "seconds per step (median step)", "", false)
	p.NominalY(bb.names...)
	p.Y.Min, p.Y.Max = -0.5, float64(n)-0.5
	p.X.Min = 0
	fig := newFigure("breakdown", [][]*plot.Plot{{p}})
	var below *plotter.BarChart
	for j, part := range breakdownParts {
		bars, err := plotter.NewBarChart(plotter.Values(bb.values[j]), breakdownBarH*0.75)
		if err != nil {
			return nil, err
		}
		bars.Horizontal = true
		bars.Color, bars.LineStyle.Width = part.color, 0
		if below != nil {
			bars.StackOn(below)
		}
		below = bars
		p.Add(bars)
		fig.addSeries(part.name, bars)
	}
	p.X.Max *= 1.05 // room right of the longest bar
	// Tall enough for every bar's label, never shorter than other charts; wider
	// than a panel for the labels left of the bars.
	fig.Height = max(panelH, breakdownBarH*vg.Length(n)+1.4*vg.Inch)
	fig.Width = panelW + 1.5*vg.Inch
	return fig, nil
}

// stackedBars are the breakdown chart's bars: names from the bottom bar up,
// values[j] breakdownParts[j]'s segment of each, the runs drawn, and a note
// when some were left out.
type stackedBars struct {
	names  []string
	values [][]float64
	runs   []results.Run
	note   string
}

// breakdownBars picks and orders the breakdown chart's runs: the ok ones with a
// breakdown, in their labels' natural order (world size 2 before 16) from the
// top (gonum counts nominal y from the bottom), at most maxBreakdownBars.
func breakdownBars(runs []results.Run) (stackedBars, error) {
	var have []results.Run
	for _, r := range okRuns(runs) {
		if r.Metrics.StepBreakdown != nil {
			have = append(have, r)
		}
	}
	if len(have) == 0 {
		return stackedBars{}, fmt.Errorf("breakdown: %w (needs ok runs with a step breakdown)", ErrNothingToPlot)
	}
	// gpus_per_node and global_batch follow from world size, nodes, batch and
	// accumulation: naming them too would only lengthen the labels.
	g := newGrouping(have, "sweep", "gpus_per_node", "global_batch")
	labels := make([]string, len(have))
	for i := range have {
		labels[i] = g.label(&have[i])
	}
	idx := make([]int, len(have))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return naturalLess(labels[idx[a]], labels[idx[b]]) })
	bb := stackedBars{runs: have}
	if len(idx) > maxBreakdownBars {
		bb.note = fmt.Sprintf(" (%d of %d runs)", maxBreakdownBars, len(idx))
		idx = idx[:maxBreakdownBars]
	}
	n := len(idx)
	bb.names = make([]string, n)
	bb.values = make([][]float64, len(breakdownParts))
	for j := range bb.values {
		bb.values[j] = make([]float64, n)
	}
	for k, i := range idx {
		bb.names[n-1-k] = labels[i]
		for j, part := range breakdownParts {
			bb.values[j][n-1-k] = part.get(have[i].Metrics.StepBreakdown)
		}
	}
	return bb, nil
}
