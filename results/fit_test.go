package results

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/olekukonko/tablewriter/pkg/twwidth"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// quickstartRuns are the runs of sweeps/examples/quickstart.yaml as the sim
// backend stored them (testdata/quickstart: run_args.json and metrics.json).
func quickstartRuns(t *testing.T) []Run {
	t.Helper()
	runs, err := Load("testdata/quickstart")
	require.NoError(t, err)
	require.Len(t, runs, 9)
	return runs
}

func report(t *testing.T, runs []Run, opt ReportOptions) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, Report(&buf, runs, opt))
	return buf.String()
}

// TestFittedTableGolden renders the quickstart table at 80, 120 and 200
// columns: every line fits, every run has its row, and the text is the golden.
func TestFittedTableGolden(t *testing.T) {
	runs := quickstartRuns(t)
	for _, width := range []int{80, 120, 200} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			out := report(t, runs, ReportOptions{Width: width})
			golden(t, fmt.Sprintf("report_quickstart_%d", width), []byte(out))
			rows := 0
			for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				assert.LessOrEqual(t, twwidth.Width(line), width, "line %q", line)
				if strings.HasPrefix(line, "│ ") && !strings.Contains(line, "sharding") && !strings.Contains(line, "ws ") {
					rows++
				}
			}
			assert.Equal(t, len(runs), rows, "one row per run:\n%s", out)
			assert.NotContains(t, out, "-a33cf029d8dd7e19", "the run ID repeats the axes; it is left out")
			assert.Contains(t, out, "not shown: run ID, gpus_per_node, global_batch, status")
		})
	}
}

// TestFitDropsInTheStatedOrder narrows the quickstart table column by column
// and requires the figures to go in fitPriority's reverse order, the headings
// to be abbreviated before any figure goes, and tokens/s/rank to stay.
func TestFitDropsInTheStatedOrder(t *testing.T) {
	runs := quickstartRuns(t)
	full := map[string]string{"tokens_per_s_per_rank": "tokens/s/rank", "peak_mem_reserved_bytes": "peak reserved (GiB)",
		"mfu": "MFU (%)", "memory_saving": "memory saving (%)", "step_time_s.median": "step median (s)", "scaling_efficiency": "scaling eff. (%)"}
	var lastShown []string
	abbreviated := false
	for width := 200; width >= MinWidth; width-- {
		out := report(t, runs, ReportOptions{Width: width})
		header := strings.SplitN(out, "\n", 3)[1]
		var shown []string
		for _, name := range fitPriority {
			if strings.Contains(header, " "+full[name]+" ") || strings.Contains(header, " "+shortHeaders[name]+" ") {
				shown = append(shown, name)
			}
		}
		if strings.Contains(header, " ws ") {
			abbreviated = true
		} else {
			assert.Len(t, shown, len(fitPriority), "width %d: a figure went before the headings were abbreviated", width)
		}
		require.Equal(t, fitPriority[:len(shown)], shown, "width %d: figures go from the end of fitPriority", width)
		if len(shown) < len(lastShown) {
			t.Logf("width %d: %s goes", width, lastShown[len(shown)])
		}
		lastShown = shown
	}
	assert.True(t, abbreviated)
	assert.Equal(t, []string{"tokens_per_s_per_rank"}, lastShown, "at %d columns only the first figure is left", MinWidth)
}

// TestFitLeavesOtherFormatsAndPivotsWhole: Width changes the text table only;
// Markdown, CSV, JSON and pivots are the whole report at any width, and Width
// 0 is the whole table.
func TestFitLeavesOtherFormatsAndPivotsWhole(t *testing.T) {
	runs := quickstartRuns(t)
	for _, opt := range []ReportOptions{{Format: FormatMarkdown}, {Format: FormatCSV}, {Format: FormatJSON},
		{Rows: []string{"world_size"}, Cols: []string{"sharding"}}} {
		t.Run(opt.Format+strings.Join(opt.Rows, ","), func(t *testing.T) {
			whole := report(t, runs, opt)
			opt.Width = MinWidth
			assert.Equal(t, whole, report(t, runs, opt))
		})
	}
	whole := report(t, runs, ReportOptions{})
	assert.Contains(t, whole, "ws1-bs4-full_shard-ac0-pre-a33cf029d8dd7e19", "the whole table keeps the run ID")
	assert.Contains(t, whole, "global_batch")
}

// TestFitKeepsRunIDWhenAxesDoNotTellRunsApart: two runs that differ in no axis
// (only in a setting such as the timeout) keep the run ID column.
func TestFitKeepsRunIDWhenAxesDoNotTellRunsApart(t *testing.T) {
	a, b := fixtureConfig(1, sweeps.FullShard), fixtureConfig(1, sweeps.FullShard)
	b.Timeout = 1e9
	b.ID = b.ID + "-other"
	c := fixtureConfig(2, sweeps.FullShard)
	var runs []Run
	for _, rc := range []sweeps.RunConfig{a, b, c} {
		runs = append(runs, Run{Config: rc, Metrics: Normalize(rc, []Result{fixtureResult(rc)})})
	}
	Derive(runs)
	out := report(t, runs, ReportOptions{Width: 200})
	assert.Contains(t, out, b.ID)
	assert.NotContains(t, out, "not shown: run ID")
}

// TestFitCutsLongTextCells: a text axis wider than the terminal is cut with
// "…", keeping the head and the last characters.
func TestFitCutsLongTextCells(t *testing.T) {
	var runs []Run
	for i, model := range []string{"/very/long/path/to/a/hugging/face/checkpoint/of/some/model/config-7b.json",
		"/very/long/path/to/a/hugging/face/checkpoint/of/some/model/config-8b.json"} {
		rc := fixtureConfig(1+i, sweeps.FullShard)
		rc.Model = model
		rc.AssignID()
		runs = append(runs, Run{Config: rc, Metrics: Normalize(rc, []Result{fixtureResult(rc)})})
	}
	Derive(runs)
	out := report(t, runs, ReportOptions{Width: 60})
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		assert.LessOrEqual(t, twwidth.Width(line), 60, "line %q", line)
	}
	assert.Contains(t, out, "…")
	assert.Contains(t, out, "config-7b.json", "the tail that tells the paths apart stays")
	assert.Contains(t, out, "config-8b.json")
}

func TestEllipsis(t *testing.T) {
	tests := []struct {
		in   string
		w    int
		want string
	}{
		{"short", 8, "short"},
		{"full_shard_and_more", 8, "full…ore"},
		{"abcdefghij", 9, "abcd…ghij"},
		{"ab", 1, "…"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ellipsis(tt.in, tt.w), "%q at %d", tt.in, tt.w)
		assert.LessOrEqual(t, twwidth.Width(ellipsis(tt.in, tt.w)), max(tt.w, 1))
	}
}

func TestReportWidthBounds(t *testing.T) {
	runs := quickstartRuns(t)
	for _, w := range []int{-1, 1, MinWidth - 1, MaxWidth + 1} {
		var buf bytes.Buffer
		err := Report(&buf, runs, ReportOptions{Width: w})
		require.Error(t, err, "width %d", w)
		assert.Contains(t, err.Error(), fmt.Sprintf("table width %d", w))
	}
}

// TestCompareFits: compare's tables at a width: run IDs lose their hash (the
// slugs still tell the runs apart), long side headings are cut, every line
// fits; Markdown and width 0 stay whole.
func TestCompareFits(t *testing.T) {
	runs := quickstartRuns(t)
	side := "/a/long/path/to/the/results/of/the/quickstart"
	for _, width := range []int{0, 100, 80, 60} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			cmp, err := Compare(runs, runs, CompareOptions{BaselineName: side, CurrentName: side})
			require.NoError(t, err)
			require.NoError(t, cmp.Fit(width))
			var buf bytes.Buffer
			require.NoError(t, cmp.Write(&buf, FormatTable))
			out := buf.String()
			if width == 0 {
				assert.Contains(t, out, "ws1-bs4-ddp-ac0-pre-e2134c8d813a7063")
				assert.Contains(t, out, side)
				return
			}
			for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				assert.LessOrEqual(t, twwidth.Width(line), width, "line %q", line)
			}
			assert.NotContains(t, out, "e2134c8d813a7063")
			assert.Contains(t, out, "run IDs without their hash")
			if width >= 80 {
				assert.Contains(t, out, "ws1-bs4-shard_grad_op-ac0-pre ", "at %d the slugs are whole", width)
			}
			buf.Reset()
			require.NoError(t, cmp.Write(&buf, FormatMarkdown))
			assert.Contains(t, buf.String(), "ws1-bs4-ddp-ac0-pre-e2134c8d813a7063", "Markdown is whole")
		})
	}
	cmp, err := Compare(runs, runs, CompareOptions{})
	require.NoError(t, err)
	assert.Error(t, cmp.Fit(10))
}

// TestWriteTable: the CLI's other tables use the report renderer: numbers
// aligned right, text left, no cell wrapped, a short row refused.
func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	long := strings.Repeat("a long summary ", 20)
	require.NoError(t, WriteTable(&buf, []string{"name", "GiB"}, [][]string{{"sim", "1.5"}, {long, "-"}, {"x", "12.25"}}))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 7, "one line per row: %s", buf.String())
	assert.Contains(t, lines[3], "│ sim ")
	assert.True(t, strings.HasSuffix(lines[3], "   1.5 │"), "%q", lines[3])
	assert.Error(t, WriteTable(&buf, []string{"a", "b"}, [][]string{{"1"}}))
}
