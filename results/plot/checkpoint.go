package plot

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/fsdpbench/fsdpbench/results"
)

const mib = 1 << 20

// Checkpoint draws the checkpoint phase against the world size: one save's and
// one load's seconds, and the bytes the largest rank wrote, one line per
// checkpoint kind (and per other axis that varies). ErrNothingToPlot when no ok
// run checkpointed.
func Checkpoint(runs []results.Run) (*Figure, error) {
	var have []results.Run
	for _, r := range okRuns(runs) {
		if r.Metrics.CheckpointSaveS != nil && r.Metrics.CheckpointBytesPerRank != nil {
			have = append(have, r)
		}
	}
	if len(have) == 0 {
		return nil, fmt.Errorf("checkpoint: %w (needs ok runs that checkpointed)", ErrNothingToPlot)
	}
	ws := distinct(have, func(r *results.Run) int { return r.Config.WorldSize })
	xOf := func(r *results.Run) float64 { return float64(r.Config.WorldSize) }
	groups, labels := groupRuns(have, scalingAxes, []string{"nodes", "gpus_per_node"}, xOf)
	ctx := context(runs)
	save := newPanel(titled("Checkpoint save", ctx), "world size (ranks)", "seconds per save (slowest rank)")
	load := newPanel(titled("Checkpoint load", ctx), "world size (ranks)", "seconds per load (resume check)")
	size := newPanel(titled("Checkpoint size", ctx), "world size (ranks)", "MiB written by the largest rank")
	for _, p := range []*plot.Plot{save, load, size} {
		log2Axis(p, append([]float64(nil), ws...))
		p.Y.Min = 0
	}
	fig := newFigure("checkpoint", [][]*plot.Plot{{save, load, size}})
	styles := seriesStyles(labels, func(l string) string { return groups[l][0].Config.Checkpoint })
	for _, l := range labels {
		st := styles[l]
		var s, ld, b plotter.XYs
		for _, r := range groups[l] {
			m := r.Metrics
			s = append(s, plotter.XY{X: xOf(r), Y: *m.CheckpointSaveS})
			if m.CheckpointLoadS != nil {
				ld = append(ld, plotter.XY{X: xOf(r), Y: *m.CheckpointLoadS})
			}
			b = append(b, plotter.XY{X: xOf(r), Y: float64(*m.CheckpointBytesPerRank) / mib})
		}
		for _, pts := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{save, s}, {load, ld}, {size, b}} {
			if len(pts.xys) == 0 {
				continue
			}
			ln, sc, err := line(pts.xys, st)
			if err != nil {
				return nil, err
			}
			pts.p.Add(ln, sc)
			if pts.p == save {
				fig.addSeries(l, ln, sc)
			}
		}
	}
	return fig, nil
}
