package results

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchfmt"
)

func exportRuns(t *testing.T) []Run {
	runs := fixtureRuns()
	full := fullRun(t)
	full.Metrics.Error = "a note with a comma, a \"quote\"\nand a newline" // RFC 4180 quoting
	return append(runs, full)
}

func TestWriteCSV(t *testing.T) {
	runs := exportRuns(t)
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, runs))
	golden(t, "export_csv", buf.Bytes())

	recs, err := csv.NewReader(bytes.NewReader(buf.Bytes())).ReadAll()
	require.NoError(t, err, "RFC 4180: encoding/csv reads it back")
	require.Len(t, recs, len(runs)+1)
	cols := Columns()
	for j, c := range cols {
		assert.Equal(t, c.Name, recs[0][j])
	}
	for i := range runs {
		rec := recs[i+1]
		require.Len(t, rec, len(cols))
		for j := range cols {
			v := cols[j].Value(&runs[i])
			if v == nil {
				assert.Empty(t, rec[j], "%s of %s: unknown is an empty cell", cols[j].Name, runs[i].Config.ID)
				continue
			}
			assert.Equal(t, plainValue(v), rec[j], cols[j].Name)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	runs := exportRuns(t)
	var buf bytes.Buffer
	require.NoError(t, WriteJSON(&buf, runs))
	golden(t, "export_json", buf.Bytes())

	var back []ExportedRun
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	require.Len(t, back, len(runs))
	for i := range runs {
		assert.Equal(t, runs[i].Config.ID, back[i].Config.ID)
		assert.Equal(t, runs[i].Metrics.Status, back[i].Metrics.Status)
		assert.Equal(t, runs[i].Metrics.TokensPerSPerRank, back[i].Metrics.TokensPerSPerRank)
		assert.Equal(t, runs[i].Derived, back[i].Derived)
	}

	buf.Reset()
	require.NoError(t, WriteJSON(&buf, nil))
	assert.JSONEq(t, "[]", buf.String(), "no runs: an empty array, not null")
}

func TestWriteBenchfmt(t *testing.T) {
	runs := exportRuns(t)
	var buf bytes.Buffer
	require.NoError(t, WriteBenchfmt(&buf, runs))
	golden(t, "export_benchfmt", buf.Bytes())

	rd := benchfmt.NewReader(bytes.NewReader(buf.Bytes()), "export.txt")
	type line struct {
		name  string
		sweep string
		tps   float64
	}
	var got []line
	for rd.Scan() {
		switch rec := rd.Result().(type) {
		case *benchfmt.Result:
			tps, ok := rec.Value("tokens/s/rank")
			require.True(t, ok, rec.Name.String())
			got = append(got, line{rec.Name.String(), rec.GetConfig("sweep"), tps})
		case *benchfmt.SyntaxError:
			t.Fatalf("benchfmt cannot read its own output: %v", rec)
		}
	}
	require.NoError(t, rd.Err())
	assert.Equal(t, 1, rd.Units().GetBetter("tokens/s/rank"))
	assert.Equal(t, -1, rd.Units().GetBetter("sec/step"))

	var want []line
	for i := range runs {
		r := &runs[i]
		if r.Metrics.Status != StatusOK {
			continue
		}
		if s := r.Metrics.Samples[SampleTokensPerSPerRank]; len(s) > 0 {
			for _, v := range s {
				want = append(want, line{"", r.Config.Sweep, v})
			}
			continue
		}
		want = append(want, line{"", r.Config.Sweep, *r.Metrics.TokensPerSPerRank})
	}
	require.Len(t, got, len(want), "one line per repeat of each ok run")
	for i := range want {
		assert.Contains(t, got[i].name, "/sharding=")
		assert.Equal(t, want[i].sweep, got[i].sweep)
		assert.InDelta(t, want[i].tps, got[i].tps, 1e-9)
	}
}
