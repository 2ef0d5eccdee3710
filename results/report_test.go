package results

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReportGolden(t *testing.T) {
	pivot := ReportOptions{Rows: []string{"sharding"}, Cols: []string{"world_size"}}
	twoMetrics := ReportOptions{Rows: []string{"world_size"}, Cols: []string{"sharding"},
		Metrics: []string{"tokens_per_s_per_rank", "peak_mem_reserved_bytes"}}
	tests := []struct {
		name string
		runs []Run
		opt  ReportOptions
	}{
		{"default_table", fixtureRuns(), ReportOptions{}},
		{"default_markdown", fixtureRuns(), ReportOptions{Format: FormatMarkdown}},
		{"default_csv", fixtureRuns(), ReportOptions{Format: FormatCSV}},
		{"default_json", fixtureRuns(), ReportOptions{Format: FormatJSON}},
		{"pivot_table", fixtureRuns(), pivot},
		{"pivot_markdown", fixtureRuns(), ReportOptions{Rows: pivot.Rows, Cols: pivot.Cols, Format: FormatMarkdown}},
		{"pivot_csv", fixtureRuns(), ReportOptions{Rows: pivot.Rows, Cols: pivot.Cols, Format: FormatCSV}},
		{"pivot_two_metrics_table", fixtureRuns(), twoMetrics},
		{"predicted_table", predictedRuns(), ReportOptions{}},
		{"predicted_markdown", predictedRuns(), ReportOptions{Format: FormatMarkdown}},
		{"repeats_table", []Run{fullRun(t)}, ReportOptions{Metrics: []string{"tokens_per_s_per_rank", "step_time_s.median", "comm_bytes_per_step.all_gather", "started"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, Report(&buf, tt.runs, tt.opt))
			golden(t, "report_"+tt.name, buf.Bytes())
		})
	}
}

func TestReportCells(t *testing.T) {
	runs := fixtureRuns()
	var buf bytes.Buffer
	require.NoError(t, Report(&buf, runs, ReportOptions{Format: FormatCSV}))
	recs, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	header := recs[0]
	assert.Equal(t, []string{"id", "world_size", "gpus_per_node", "global_batch", "sharding"}, header[:5],
		"the run ID, then only the axes that vary")
	col := map[string]int{}
	for j, h := range header {
		col[h] = j
	}
	require.Contains(t, col, "tokens_per_s_per_rank")
	for _, rec := range recs[1:] {
		r := findRun(t, runs, rec[col["id"]])
		if r.Metrics.Status != StatusOK {
			assert.Equal(t, string(r.Metrics.Status), rec[col["tokens_per_s_per_rank"]], "a non-ok run shows its status")
			continue
		}
		assert.Equal(t, plainValue(*r.Metrics.TokensPerSPerRank), rec[col["tokens_per_s_per_rank"]])
		assert.Equal(t, plainValue(*r.Metrics.PeakMemReservedBytes), rec[col["peak_mem_reserved_bytes"]], "CSV keeps bytes")
	}
}

func findRun(t *testing.T, runs []Run, id string) *Run {
	t.Helper()
	for i := range runs {
		if runs[i].Config.ID == id {
			return &runs[i]
		}
	}
	t.Fatalf("no run %s", id)
	return nil
}

func TestReportJSONIsValid(t *testing.T) {
	for _, opt := range []ReportOptions{{Format: FormatJSON}, {Format: FormatJSON, Rows: []string{"sharding"}, Cols: []string{"world_size"}}} {
		var buf bytes.Buffer
		require.NoError(t, Report(&buf, fixtureRuns(), opt))
		var rows []map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &rows), buf.String())
		assert.NotEmpty(t, rows)
	}
	var buf bytes.Buffer
	require.NoError(t, Report(&buf, nil, ReportOptions{Format: FormatJSON}))
	assert.JSONEq(t, "[]", buf.String())
}

func TestReportErrors(t *testing.T) {
	runs := fixtureRuns()
	tests := []struct {
		name string
		opt  ReportOptions
		want []string
	}{
		{"unknown metric", ReportOptions{Metrics: []string{"tokens_per_sec"}}, []string{`unknown metric or derived "tokens_per_sec"`, "tokens_per_s_per_rank", "memory_saving"}},
		{"unknown row", ReportOptions{Rows: []string{"strategy"}}, []string{`rows: unknown axis "strategy"`, "sharding", "world_size"}},
		{"metric as a column axis", ReportOptions{Cols: []string{"mfu"}}, []string{`cols: unknown axis "mfu"`}},
		{"axis twice", ReportOptions{Rows: []string{"sharding"}, Cols: []string{"sharding"}}, []string{`axis "sharding" is already in rows`}},
		{"unknown format", ReportOptions{Format: "html"}, []string{`unknown report format "html"`, "table, markdown, csv, json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Report(&bytes.Buffer{}, runs, tt.opt)
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}

	t.Run("two runs in one cell", func(t *testing.T) {
		dup := append(fixtureRuns()[:1], fixtureRuns()[:1]...)
		dup[1].Config.ID += "-again"
		err := Report(&bytes.Buffer{}, dup, ReportOptions{Rows: []string{"sharding"}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "fall in the same cell")
	})
}

func TestReportNoRuns(t *testing.T) {
	for _, format := range Formats {
		for _, opt := range []ReportOptions{{Format: format}, {Format: format, Rows: []string{"sharding"}, Cols: []string{"world_size"}}} {
			var buf bytes.Buffer
			require.NoError(t, Report(&buf, nil, opt), "%+v", opt)
			if format == FormatCSV {
				assert.True(t, strings.HasPrefix(buf.String(), "sharding\n") || strings.HasPrefix(buf.String(), "id,status\n"), buf.String())
			}
		}
	}
}

func TestReportPivotAddsVaryingAxesToRows(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, Report(&buf, fixtureRuns(), ReportOptions{Cols: []string{"sharding"}, Format: FormatCSV}))
	header, _, _ := strings.Cut(buf.String(), "\n")
	assert.Equal(t, "world_size,tokens_per_s_per_rank[sharding=full_shard],tokens_per_s_per_rank[sharding=no_shard]", header,
		"world_size tells the runs apart; gpus_per_node and global_batch follow from it")
}

func TestMarkdownEscape(t *testing.T) {
	assert.Equal(t, `a \| b \* c \\ d_e`, markdownEscape(`a | b * c \ d_e`))
}

func TestFourDigits(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{12345.6, "12346"}, {123.456, "123.5"}, {12.3456, "12.35"}, {1.23456, "1.235"}, {0.0123456, "0.01235"},
		{4.5e10, "4.5e+10"}, {0, "0"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, fourDigits(tt.in), "%v", tt.in)
	}
}

func TestChunkedTableIsOneTable(t *testing.T) {
	var synth []Run
	for i := 0; i < 50; i++ {
		rc, m := synthRun("synth", i*37)
		synth = append(synth, Run{Config: rc, Metrics: m})
	}
	Derive(synth)
	defer func(n int) { tableChunkRows = n }(tableChunkRows)
	for _, set := range []struct {
		name string
		runs []Run
	}{{"fixture", fixtureRuns()}, {"predicted", predictedRuns()}, {"synth", synth}} {
		for _, opt := range []ReportOptions{{}, {Format: FormatMarkdown}, {Rows: []string{"sharding"}, Cols: []string{"world_size"}},
			{Rows: []string{"sharding"}, Cols: []string{"world_size"}, Format: FormatMarkdown}} {
			tableChunkRows = 1 << 20
			var whole bytes.Buffer
			require.NoError(t, Report(&whole, set.runs, opt))
			for _, n := range []int{1, 2, 7} {
				tableChunkRows = n
				var chunked bytes.Buffer
				require.NoError(t, Report(&chunked, set.runs, opt))
				assert.Equal(t, whole.String(), chunked.String(), "%s %+v in chunks of %d rows", set.name, opt, n)
			}
		}
	}
}
