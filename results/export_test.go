package results

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
