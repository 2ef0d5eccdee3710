// Package plot draws the figures of a results set with gonum/plot, as PNG and SVG:
// scaling (throughput per rank and scaling efficiency vs world size, one line per
// strategy), memory (peak allocated and reserved bars by strategy and world size),
// batch search (throughput and memory vs batch, checkpointing on and off), the
// step time breakdown (compute, exposed communication, other per run), a
// regression chart against a baseline, and the trend of a metric over stored
// nights. Figures only draw what results computed (Load, Derive, Compare); every
// axis names its unit and every figure carries its legend in a strip of its own, so
// no line is hidden under it.
package plot

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/fsdpbench/fsdpbench/results"
)

// Figure is one chart file: panels laid out in rows and columns, sharing a legend.
type Figure struct {
	// Name is the file stem: scaling, memory, batch, checkpoint, breakdown,
	// regression or trend.
	Name string
	// Series are the legend's entries, in order: what the lines or bars stand for.
	Series []string
	// Panels are the plots, by row then column.
	Panels [][]*plot.Plot
	legend plot.Legend
	// Width and Height are the size of the panels; the legend strip adds to Width.
	Width, Height vg.Length
}

// ErrNothingToPlot says a figure does not apply to the runs (a scaling chart of a
// single world size, a batch chart without a batch axis).
var ErrNothingToPlot = errors.New("nothing to plot")

// panelW and panelH are the size of one panel; figures grow with their panels.
const (
	panelW = 5 * vg.Inch
	panelH = 3.6 * vg.Inch
	// dpi of PNG files: large enough to read in a write-up without zooming.
	dpi = 150
)

// Save writes the figure to path; the extension (.png or .svg) picks the format.
func (f *Figure) Save(path string) error {
	var buf bytes.Buffer
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png":
		c := vgimg.NewWith(vgimg.UseWH(f.Width+f.legendWidth(), f.height()), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
		f.draw(draw.New(c))
		if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
	case ".svg":
		c := vgsvg.New(f.Width+f.legendWidth(), f.height())
		dc := draw.New(c)
		dc.SetColor(color.White)
		dc.Fill(dc.Rectangle.Path())
		f.draw(dc)
		if _, err := c.WriteTo(&buf); err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
	default:
		return fmt.Errorf("plot %s: unknown format %q; use .png or .svg", path, filepath.Ext(path))
	}
	return results.WriteFileAtomic(path, buf.Bytes())
}

// draw lays the panels out left of the legend strip.
func (f *Figure) draw(c draw.Canvas) {
	legendW := f.legendWidth()
	panels := c
	panels.Max.X -= legendW
	rows, cols := len(f.Panels), 0
	for _, r := range f.Panels {
		cols = max(cols, len(r))
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: 0.15 * vg.Inch, PadY: 0.15 * vg.Inch,
		PadTop: 0.1 * vg.Inch, PadBottom: 0.1 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.1 * vg.Inch}
	canvases := plot.Align(f.Panels, tiles, panels)
	for i := range f.Panels {
		for j, p := range f.Panels[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	if legendW > 0 {
		lc := c
		lc.Min.X = c.Max.X - legendW + 0.2*vg.Inch
		lc.Max.Y -= legendTop
		f.legend.Top, f.legend.Left = true, true
		f.legend.Draw(lc)
	}
}

// newFigure sizes a figure for rows x cols panels.
func newFigure(name string, panels [][]*plot.Plot) *Figure {
	rows, cols := len(panels), 0
	for _, r := range panels {
		cols = max(cols, len(r))
	}
	f := &Figure{Name: name, Panels: panels, legend: plot.NewLegend()}
	f.legend.TextStyle.Font.Size = 11
	f.legend.ThumbnailWidth = 0.4 * vg.Inch
	f.legend.Padding = vg.Points(3)
	f.Width, f.Height = panelW*vg.Length(cols), panelH*vg.Length(rows)
	return f
}

// addSeries puts a legend entry for a series drawn by thumbs.
func (f *Figure) addSeries(name string, thumbs ...plot.Thumbnailer) {
	for _, s := range f.Series {
		if s == name {
			return
		}
	}
	f.Series = append(f.Series, name)
	f.legend.Add(name, thumbs...)
}

// legendTop is the room above the legend (draw starts it that far down).
const legendTop = 0.4 * vg.Inch

// height is the figure's drawn height: the panels', or more where the legend
// has more entries than that holds, so no entry is cut off at the bottom.
func (f *Figure) height() vg.Length {
	if len(f.Series) == 0 {
		return f.Height
	}
	r := f.legend.Rectangle(draw.Canvas{})
	return max(f.Height, r.Max.Y-r.Min.Y+legendTop+0.2*vg.Inch)
}

// legendWidth is the width of the legend strip right of the panels.
func (f *Figure) legendWidth() vg.Length {
	if len(f.Series) == 0 {
		return 0
	}
	w := vg.Length(0)
	for _, s := range f.Series {
		w = max(w, f.legend.TextStyle.Width(s))
	}
	return w + f.legend.ThumbnailWidth + 0.5*vg.Inch
}

// basePanel is a plot with the figure's fonts.
func basePanel(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = 13
	p.X.Label.Text, p.Y.Label.Text = x, y
	p.X.Label.TextStyle.Font.Size, p.Y.Label.TextStyle.Font.Size = 11, 11
	p.X.Tick.Label.Font.Size, p.Y.Tick.Label.Font.Size = 10, 10
	p.X.Tick.Marker, p.Y.Tick.Marker = readableTicks{}, readableTicks{}
	return p
}

// readableTicks are gonum's default ticks with short labels: 500k, not 500000.00.
type readableTicks struct{}

func (readableTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = shortNumber(ts[i].Value)
		}
	}
	return ts
}

// shortNumber writes v with a k or M suffix from 10,000 up.
func shortNumber(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e7:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}

// newPanel is a panel for lines, with a grid.
func newPanel(title, x, y string) *plot.Plot {
	p := basePanel(title, x, y)
	p.Add(plotter.NewGrid())
	return p
}

// newBarPanel is a panel for bars along x (vertical) or y: no grid lines across the
// categories, which would cut through the bar groups.
func newBarPanel(title, x, y string, vertical bool) *plot.Plot {
	p := basePanel(title, x, y)
	g := plotter.NewGrid()
	if vertical {
		g.Vertical.Color = nil
	} else {
		g.Horizontal.Color = nil
	}
	p.Add(g)
	return p
}

// style is the look of one series, the same in every panel of a figure.
type style struct {
	color color.Color
	shape draw.GlyphDrawer
	dash  []vg.Length
}

func styleOf(i int) style {
	return style{color: plotutil.Color(i), shape: plotutil.Shape(i), dash: plotutil.Dashes(i / len(plotutil.SoftColors))}
}

// seriesStyles gives each series its look: one color and marker per strategy, one
// dash pattern per value of the other axes (ckpt off solid, on dashed), so a
// strategy's lines read as one family. With a single strategy the other axes take
// the colors.
func seriesStyles(labels []string, strategyOf func(string) string) map[string]style {
	var strategies, variants []string
	seenS, seenV := map[string]int{}, map[string]int{}
	variantOf := func(l string) string {
		return strings.TrimPrefix(strings.TrimPrefix(l, strategyOf(l)), ", ")
	}
	for _, l := range labels {
		if _, ok := seenS[strategyOf(l)]; !ok {
			seenS[strategyOf(l)] = len(strategies)
			strategies = append(strategies, strategyOf(l))
		}
		if _, ok := seenV[variantOf(l)]; !ok {
			seenV[variantOf(l)] = len(variants)
			variants = append(variants, variantOf(l))
		}
	}
	out := map[string]style{}
	for i, l := range labels {
		switch {
		case len(strategies) == 1:
			out[l] = styleOf(seenV[variantOf(l)])
		case len(variants) == 1:
			out[l] = styleOf(seenS[strategyOf(l)])
		default:
			st := styleOf(seenS[strategyOf(l)])
			st.dash = plotutil.Dashes(seenV[variantOf(l)])
			out[l] = st
		}
		_ = i
	}
	return out
}

// line draws xys as a line with markers in style s.
func line(xys plotter.XYs, s style) (*plotter.Line, *plotter.Scatter, error) {
	l, sc, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, nil, err
	}
	l.Color, l.Width, l.Dashes = s.color, vg.Points(1.8), s.dash
	sc.Color, sc.Shape, sc.Radius = s.color, s.shape, vg.Points(3.5)
	return l, sc, nil
}

// Shorter names for axes in series labels.
var axisLabel = map[string]string{
	"activation_checkpointing": "ckpt",
	"backward_prefetch":        "prefetch",
	"forward_prefetch":         "fwd prefetch",
	"cpu_offload":              "offload",
	"batch_per_device":         "batch",
	"gpus_per_node":            "gpus/node",
	"mixed_precision":          "",
	"sharding":                 "",
}

// grouping splits runs into series by the axes that vary among them, leaving out
// the ones the chart puts on an axis (exclude).
type grouping struct {
	axes []results.Column
}

func newGrouping(runs []results.Run, exclude ...string) grouping {
	skip := map[string]bool{"id": true}
	for _, e := range exclude {
		skip[e] = true
	}
	var g grouping
	for _, c := range results.ColumnsOf(results.KindAxis) {
		if skip[c.Name] {
			continue
		}
		seen := map[string]bool{}
		for i := range runs {
			seen[c.Plain(&runs[i])] = true
		}
		if len(seen) > 1 {
			g.axes = append(g.axes, c)
		}
	}
	// The strategy names the series first.
	sort.SliceStable(g.axes, func(i, j int) bool { return g.axes[i].Name == "sharding" && g.axes[j].Name != "sharding" })
	return g
}

// label names the series of run r: "full_shard, ckpt on".
func (g grouping) label(r *results.Run) string {
	var parts []string
	for _, c := range g.axes {
		v := c.Plain(r)
		switch v {
		case "true":
			v = "on"
		case "false":
			v = "off"
		}
		name, ok := axisLabel[c.Name]
		if !ok {
			name = c.Name
		}
		if name == "" {
			parts = append(parts, v)
		} else {
			parts = append(parts, name+" "+v)
		}
	}
	if len(parts) == 0 {
		return "all runs"
	}
	return strings.Join(parts, ", ")
}

// seriesOrder sorts series labels with the strategies in their usual order.
func seriesOrder(labels []string) {
	rank := func(s string) int {
		for i, v := range []string{"full_shard", "shard_grad_op", "hybrid_shard", "no_shard", "ddp"} {
			if strings.HasPrefix(s, v) {
				return i
			}
		}
		return 99
	}
	sort.SliceStable(labels, func(i, j int) bool {
		if a, b := rank(labels[i]), rank(labels[j]); a != b {
			return a < b
		}
		return naturalLess(labels[i], labels[j])
	})
}

// naturalLess orders labels as people read them: runs of digits by their value
// ("batch 2" before "batch 16" before "batch 128"), the rest as text.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitsPrefix(a), digitsPrefix(b)
		switch {
		case da != "" && db != "":
			// Numbers: the shorter (without leading zeros) is the smaller.
			ta, tb := strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
			if len(ta) != len(tb) {
				return len(ta) < len(tb)
			}
			if ta != tb {
				return ta < tb
			}
			a, b = a[len(da):], b[len(db):]
		case a[0] != b[0]:
			return a[0] < b[0]
		default:
			a, b = a[1:], b[1:]
		}
	}
	return len(a) < len(b)
}

// digitsPrefix is the run of ASCII digits s starts with.
func digitsPrefix(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// context names what the runs are, for panel titles: "llama-1b, h100-sxm (predicted)".
func context(runs []results.Run) string {
	models, hw := map[string]bool{}, map[string]bool{}
	predicted := false
	for i := range runs {
		models[runs[i].Config.Model] = true
		hw[runs[i].Config.Hardware] = true
		predicted = predicted || runs[i].Metrics.Predicted
	}
	var parts []string
	if len(models) == 1 {
		for m := range models {
			parts = append(parts, m)
		}
	}
	if len(hw) == 1 {
		for h := range hw {
			parts = append(parts, h)
		}
	}
	s := strings.Join(parts, ", ")
	if predicted {
		s += " (predicted by sim)"
	}
	return s
}

func titled(what, ctx string) string {
	if ctx == "" {
		return what
	}
	return what + "\n" + ctx
}

// powTicks marks the values present on a log2 axis (1, 2, 4, 8 ranks).
type powTicks []float64

func (t powTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, v := range t {
		if v >= lo && v <= hi {
			out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
	}
	return out
}

// log2Axis puts the distinct values on a log scale with a tick at each.
func log2Axis(p *plot.Plot, values []float64) {
	sort.Float64s(values)
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = powTicks(values)
	lo, hi := values[0], values[len(values)-1]
	pad := math.Pow(hi/lo, 0.06)
	if hi == lo {
		pad = 1.5
	}
	p.X.Min, p.X.Max = lo/pad, hi*pad
}

// distinct returns the sorted distinct values of an int axis.
func distinct(runs []results.Run, get func(*results.Run) int) []float64 {
	seen := map[int]bool{}
	var out []float64
	for i := range runs {
		v := get(&runs[i])
		if v > 0 && !seen[v] {
			seen[v] = true
			out = append(out, float64(v))
		}
	}
	sort.Float64s(out)
	return out
}

// All renders every figure that applies to runs: scaling, memory, batch, checkpoint.
func All(runs []results.Run) ([]*Figure, error) {
	for i := range runs {
		// gonum refuses NaN and infinities without saying whose they are.
		if err := results.CheckRun(&runs[i]); err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
	}
	var figs []*Figure
	for _, make := range []func([]results.Run) (*Figure, error){Scaling, Memory, BatchSearch, Checkpoint, Breakdown} {
		f, err := make(runs)
		if errors.Is(err, ErrNothingToPlot) {
			continue
		}
		if err != nil {
			return nil, err
		}
		figs = append(figs, f)
	}
	return figs, nil
}

// WriteAll saves each figure as <dir>/<name>.png and .svg and returns the paths.
func WriteAll(dir string, figs []*Figure) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot directory %s: %w", dir, err)
	}
	var paths []string
	for _, f := range figs {
		for _, ext := range []string{".png", ".svg"} {
			p := filepath.Join(dir, f.Name+ext)
			if err := f.Save(p); err != nil {
				return paths, err
			}
			paths = append(paths, p)
		}
	}
	return paths, nil
}
