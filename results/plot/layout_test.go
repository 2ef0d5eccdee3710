package plot

import (
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

func TestNaturalOrder(t *testing.T) {
	labels := []string{"batch 128", "batch 16", "batch 2", "batch 1", "full_shard, batch 8", "full_shard, batch 64"}
	seriesOrder(labels)
	assert.Equal(t, []string{"full_shard, batch 8", "full_shard, batch 64", "batch 1", "batch 2", "batch 16", "batch 128"}, labels)
	got := []string{"ws 10", "ws 9", "ws 09x", "a", ""}
	sort.Slice(got, func(i, j int) bool { return naturalLess(got[i], got[j]) })
	assert.Equal(t, []string{"", "a", "ws 9", "ws 09x", "ws 10"}, got)
}

// TestMemoryFacetsPreferData: a memory chart with more facets than it draws
// shows them in numeric order, and keeps the ones with a figure over the
// ones where every run was out of memory (text order dropped batch 2 for
// batch 128).
func TestMemoryFacetsPreferData(t *testing.T) {
	var runs []results.Run
	for _, b := range []int{1, 2, 16, 32, 64, 128} {
		for _, ws := range []int{1, 2} {
			for _, ckpt := range []bool{false, true} {
				r := run(ws, b, sweeps.FullShard, ckpt, 1)
				if b >= 32 {
					r.Metrics.Status = results.StatusOOM // all-infeasible facets
				}
				runs = append(runs, r)
			}
		}
	}
	results.Derive(runs)
	f, err := Memory(runs)
	require.NoError(t, err)
	var titles []string
	for _, p := range f.Panels[0] {
		titles = append(titles, strings.SplitN(p.Title.Text, "\n", 2)[0])
	}
	require.Len(t, titles, maxFacets)
	for i, want := range []string{"batch 1, ckpt off", "batch 1, ckpt on", "batch 2, ckpt off", "batch 2, ckpt on"} {
		assert.Contains(t, titles[i], ": "+want, titles)
	}
}

// TestMemoryNodeLabels: categories of one world size on several node counts
// put the node count on a line of its own, so neighbouring labels do not run
// into each other.
func TestMemoryNodeLabels(t *testing.T) {
	var runs []results.Run
	for _, nodes := range []int{1, 2, 4} {
		for _, ws := range []int{8, 16} {
			r := run(ws, 2, sweeps.FullShard, false, 1)
			r.Config.Nodes, r.Config.GPUsPerNode = nodes, ws/nodes
			r.Config.AssignID()
			runs = append(runs, r)
		}
	}
	f, err := Memory(runs)
	require.NoError(t, err)
	p := f.Panels[0][0]
	var labels []string
	for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	assert.Contains(t, labels, "16\n4 nodes")
	// Each line of a label fits the width of its category.
	perCat := (panelW - 1.1*vg.Inch) / vg.Length(len(labels))
	for _, l := range labels {
		for _, line := range strings.Split(l, "\n") {
			assert.Less(t, p.X.Tick.Label.Width(line), perCat, "label %q", line)
		}
	}
}

// TestLegendNeverCutOff: a figure with more series than the panels' height
// holds grows to show every legend entry.
func TestLegendNeverCutOff(t *testing.T) {
	var runs []results.Run
	for i := range 24 {
		for _, ws := range []int{1, 2} {
			r := run(ws, 2, sweeps.FullShard, false, 1)
			r.Config.Seed = int64(i) // one series per seed
			r.Config.AssignID()
			runs = append(runs, r)
		}
	}
	results.Derive(runs)
	f, err := Scaling(runs)
	require.NoError(t, err)
	require.Len(t, f.Series, 25)
	r := f.legend.Rectangle(draw.Canvas{})
	need := r.Max.Y - r.Min.Y + legendTop
	require.Greater(t, need, f.Height, "the legend is taller than the panels")

	dir := t.TempDir()
	path := filepath.Join(dir, "scaling.png")
	require.NoError(t, f.Save(path))
	pf, err := os.Open(path)
	require.NoError(t, err)
	defer pf.Close()
	img, err := png.Decode(pf)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, float64(img.Bounds().Dy()), float64(need/vg.Inch)*dpi, fmt.Sprint(f.Series))
}
