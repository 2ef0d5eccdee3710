package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/vg"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// run is one normalized run: throughput per rank falls with the world size, memory
// falls under full_shard, and no_shard at 4 ranks runs out of memory.
func run(ws, batch int, sharding string, ckpt bool, speed float64) results.Run {
	rc := sweeps.Defaults()
	rc.Sweep, rc.Backend, rc.Hardware, rc.Model = "plots", "sim", "h100-sxm", "llama-1b"
	rc.SeqLen, rc.Steps, rc.Repeats = 1024, 4, 1
	rc.Nodes, rc.GPUsPerNode, rc.WorldSize, rc.BatchPerDevice, rc.GradAccum = 1, ws, ws, batch, 1
	rc.GlobalBatch, rc.Sharding, rc.ActivationCheckpointing = ws*batch, sharding, ckpt
	rc.AssignID()
	peak := int64(float64(int64(16<<30)/int64(ws)+int64(batch)*(2<<30)) * map[bool]float64{true: 0.6, false: 1}[ckpt])
	if sharding == sweeps.NoShard {
		peak = 16<<30 + int64(batch)*(2<<30)
	}
	res := results.Result{Status: results.StatusOK, Predicted: true, WorldSize: ws, TokensPerStep: rc.TokensPerStep(),
		MeasuredWallS: 0.4 * (1 + 0.1*float64(ws-1)) / speed, ModelFlopsPerToken: 1e10, PeakFlopsPerS: 989e12,
		PeakMemReservedBytes: results.I64(peak), PeakMemAllocatedBytes: results.I64(peak * 9 / 10),
		DeviceMemBytes: results.I64(80 << 30)}
	for s := 0; s < rc.Steps; s++ {
		res.Steps = append(res.Steps, results.Step{Step: s, StepTimeS: 0.1, Tokens: rc.TokensPerStep()})
	}
	if peak > 60<<30 || (sharding == sweeps.NoShard && ws == 4) {
		res = results.Result{Status: results.StatusOOM, WorldSize: ws, PeakMemReservedBytes: results.I64(peak + 20<<30)}
	}
	return results.Run{Config: rc, Metrics: results.Normalize(rc, []results.Result{res})}
}

func scalingRuns() []results.Run {
	var runs []results.Run
	for _, ws := range []int{1, 2, 4} {
		for _, sh := range []string{sweeps.FullShard, sweeps.NoShard} {
			runs = append(runs, run(ws, 2, sh, false, 1))
		}
	}
	results.Derive(runs)
	return runs
}

func batchRuns() []results.Run {
	var runs []results.Run
	for _, ckpt := range []bool{false, true} {
		for _, b := range []int{1, 2, 4, 8, 16, 32} {
			runs = append(runs, run(8, b, sweeps.FullShard, ckpt, 1))
		}
	}
	results.Derive(runs)
	return runs
}

// svgText is every piece of text an SVG file shows; it fails the test unless the
// file is well-formed XML with an <svg> root.
func svgText(t *testing.T, data []byte) string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var text strings.Builder
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "SVG is not well-formed XML")
		switch e := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = e.Name.Local
			}
		case xml.CharData:
			text.Write(e)
			text.WriteByte('\n')
		}
	}
	require.Equal(t, "svg", root)
	return text.String()
}

// checkFigure saves f as PNG and SVG and checks both files: the PNG decodes with the
// figure's size, the SVG parses and shows every series name and the axis labels.
func checkFigure(t *testing.T, f *Figure, series []string, labels ...string) {
	t.Helper()
	dir := t.TempDir()
	paths, err := WriteAll(dir, []*Figure{f})
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, f.Name+".png"), filepath.Join(dir, f.Name+".svg")}, paths)

	pf, err := os.Open(paths[0])
	require.NoError(t, err)
	defer pf.Close()
	img, err := png.Decode(pf)
	require.NoError(t, err, "PNG decodes")
	b := img.Bounds()
	assert.InDelta(t, float64((f.Width+f.legendWidth())/vg.Inch)*dpi, float64(b.Dx()), 2)
	assert.InDelta(t, float64(f.height()/vg.Inch)*dpi, float64(b.Dy()), 2)
	assert.GreaterOrEqual(t, b.Dy(), int(float64(f.Height/vg.Inch)*dpi)-2, "at least the panels' height")

	data, err := os.ReadFile(paths[1])
	require.NoError(t, err)
	text := svgText(t, data)
	assert.Equal(t, series, f.Series)
	for _, s := range append(append([]string(nil), series...), labels...) {
		assert.Contains(t, text, s, "the SVG shows %q", s)
	}
}

func TestScaling(t *testing.T) {
	f, err := Scaling(scalingRuns())
	require.NoError(t, err)
	checkFigure(t, f, []string{"full_shard", "no_shard", idealEff},
		"world size (ranks)", "tokens/s per rank", "scaling efficiency (% of smallest world size)", "llama-1b, h100-sxm (predicted by sim)")

	_, err = Scaling([]results.Run{run(8, 2, sweeps.FullShard, false, 1)})
	assert.ErrorIs(t, err, ErrNothingToPlot)
}

func TestMemory(t *testing.T) {
	f, err := Memory(scalingRuns())
	require.NoError(t, err)
	checkFigure(t, f, []string{"full_shard", "no_shard"},
		"peak allocated per rank (GiB)", "peak reserved per rank (GiB)", "oom", "world size (ranks)")
	assert.Len(t, f.Panels, 2, "allocated and reserved")
}

func TestBatchSearch(t *testing.T) {
	runs := batchRuns()
	f, err := BatchSearch(runs)
	require.NoError(t, err)
	checkFigure(t, f, []string{"ckpt off", "ckpt on", fitsNot, "device memory (80.0 GiB)"},
		"batch per device (samples)", "peak reserved per rank (GiB)", "tokens/s per rank")

	_, err = BatchSearch(scalingRuns())
	assert.ErrorIs(t, err, ErrNothingToPlot, "one batch size")

	figs, err := All(runs)
	require.NoError(t, err)
	var names []string
	for _, f := range figs {
		names = append(names, f.Name)
	}
	assert.Equal(t, []string{"memory", "batch"}, names, "one world size: no scaling chart")
}

func TestRegression(t *testing.T) {
	base := scalingRuns()
	var cur []results.Run
	for _, r := range base[:len(base)-1] { // the last run is missing now
		speed := 1.0
		if r.Config.WorldSize == 2 && r.Config.Sharding == sweeps.FullShard {
			speed = 0.9
		}
		cur = append(cur, run(r.Config.WorldSize, r.Config.BatchPerDevice, r.Config.Sharding, false, speed))
	}
	cmp, err := results.Compare(base, cur, results.CompareOptions{Metrics: []string{"tokens_per_s_per_rank", "peak_mem_reserved_bytes"}})
	require.NoError(t, err)
	rules, err := results.ParseRules([]string{"tokens_per_s_per_rank:-5%"}, "--rule")
	require.NoError(t, err)
	f, err := Regression(cmp, rules)
	require.NoError(t, err)
	checkFigure(t, f, []string{"within the limit", "regression beyond the limit", "gate limit"},
		"change vs baseline (%)", "ws2-bs2-full_shard-ac0-pre", "-10.0%", "missing",
		"both sides predicted by the analytic model, not measured")
}

func TestTrend(t *testing.T) {
	var nights []results.NightRuns
	for i, speed := range []float64{1, 1.02, 0.9, 1.01} {
		var runs []results.Run
		for _, ws := range []int{1, 2} {
			for _, sh := range []string{sweeps.FullShard, sweeps.ShardGradOp} {
				runs = append(runs, run(ws, 2, sh, false, speed))
			}
		}
		date := time.Date(2026, 3, 1+i, 0, 0, 0, 0, time.UTC)
		nights = append(nights, results.NightRuns{Runs: runs, Night: results.Night{Date: date.Format(time.DateOnly),
			Commit: "abcdef0123" + string(rune('a'+i)), Passed: speed >= 0.95}})
	}
	f, err := Trend(nights, "tokens_per_s_per_rank")
	require.NoError(t, err)
	checkFigure(t, f, []string{"full_shard", "shard_grad_op", "gate failed that night"},
		"night (date, commit)", "tokens/s/rank, geomean over runs", "03-03", "abcdef0")

	_, err = Trend(nights, "nope")
	assert.ErrorContains(t, err, "unknown metric")
}

// TestTrendKeepsInconclusiveApart (issue 37 item 4): a failed night and the
// night measured again after it on the same date and commit, whose gate was
// inconclusive, are both drawn, each with its own verdict: the inconclusive one is
// not ringed as failed, and the axis tells the two nights apart (#2).
func TestTrendKeepsInconclusiveApart(t *testing.T) {
	var nights []results.NightRuns
	for i, v := range []results.Outcome{results.OutcomePass, results.OutcomeFail, results.OutcomeInconclusive} {
		var runs []results.Run
		for _, sh := range []string{sweeps.FullShard, sweeps.ShardGradOp} {
			runs = append(runs, run(1, 2, sh, false, 1-0.05*float64(i)))
		}
		n := results.Night{Date: "2026-03-02", Commit: "abcdef0123", Seq: i, Passed: v == results.OutcomePass, Verdict: v}
		if i == 0 {
			n.Date, n.Seq = "2026-03-01", 1
		}
		nights = append(nights, results.NightRuns{Runs: runs, Night: n})
	}
	f, err := Trend(nights, "tokens_per_s_per_rank")
	require.NoError(t, err)
	checkFigure(t, f, []string{"full_shard", "shard_grad_op", "gate failed that night", "gate inconclusive that night"},
		"night (date, commit)", "03-02", "abcdef0 #2")
}

func TestSaveRejectsUnknownFormat(t *testing.T) {
	f, err := Scaling(scalingRuns())
	require.NoError(t, err)
	assert.ErrorContains(t, f.Save(filepath.Join(t.TempDir(), "x.pdf")), "use .png or .svg")
}

// TestAllNamesTheBadRun: a figure gonum cannot draw (+Inf, NaN) is refused naming its
// run and field, not as gonum's anonymous "invalid data".
func TestAllNamesTheBadRun(t *testing.T) {
	runs := scalingRuns()
	runs[2].Metrics.TokensPerSPerRank = results.F64(math.Inf(1))
	_, err := All(runs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "run "+runs[2].Config.ID+": invalid run: tokens_per_s_per_rank +Inf is not a finite figure")
	runs = scalingRuns()
	runs[1].Derived.ScalingEfficiency = results.F64(math.NaN())
	_, err = All(runs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "run "+runs[1].Config.ID+": invalid run: derived.scaling_efficiency NaN")
}

func TestCheckpoint(t *testing.T) {
	var runs []results.Run
	for _, ws := range []int{1, 2, 4} {
		for _, kind := range []string{sweeps.CheckpointSharded, sweeps.CheckpointFull} {
			r := run(ws, 2, sweeps.FullShard, false, 1)
			r.Config.Checkpoint, r.Config.CheckpointEvery, r.Config.ResumeCheck = kind, 2, true
			r.Config.AssignID()
			r.Metrics.RunID = r.Config.ID
			per := int64(12<<20) / int64(ws)
			if kind == sweeps.CheckpointFull {
				per = 12 << 20
			}
			r.Metrics.CheckpointSaveS, r.Metrics.CheckpointLoadS = results.F64(0.01*float64(ws)), results.F64(0.005*float64(ws))
			r.Metrics.CheckpointBytes, r.Metrics.CheckpointBytesPerRank = results.I64(12<<20+int64(ws)), results.I64(per)
			runs = append(runs, r)
		}
	}
	results.Derive(runs)
	f, err := Checkpoint(runs)
	require.NoError(t, err)
	checkFigure(t, f, []string{"checkpoint full", "checkpoint sharded"},
		"world size (ranks)", "seconds per save (slowest rank)", "MiB written by the largest rank")

	_, err = Checkpoint(scalingRuns())
	assert.ErrorIs(t, err, ErrNothingToPlot)
}

// A long history draws a chart of bounded size: at most maxTrendTicks labelled
// nights and maxTrendWidth wide (a tick and 0.6 inch per night made 3,000
// nights an 1,800-inch chart).
func TestTrendOfManyNightsIsBounded(t *testing.T) {
	col, err := results.LookupColumn("tokens_per_s_per_rank", results.KindMetric)
	require.NoError(t, err)
	nights := make([]trendNight, 3000)
	for i := range nights {
		nights[i] = trendNight{night: results.Night{Date: "2026-03-01", Commit: "abcdef0", Passed: true},
			sum: map[string]float64{sweeps.FullShard: math.Log(1000 + float64(i%7))}, cnt: map[string]float64{sweeps.FullShard: 1}}
	}
	f, err := drawTrend(nights, col, "tokens_per_s_per_rank")
	require.NoError(t, err)
	assert.LessOrEqual(t, f.Width, maxTrendWidth)
	labelled := 0
	for _, tk := range f.Panels[0][0].X.Tick.Marker.Ticks(0, 3000) {
		if tk.Label != "" {
			labelled++
		}
	}
	assert.LessOrEqual(t, labelled, maxTrendTicks+1)
	assert.Positive(t, labelled)
}
