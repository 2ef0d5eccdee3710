package results

import (
	"encoding/csv"
	"encoding/json"
	"io"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// WriteCSV writes every run as one row with every column of the registry (Columns),
// in its order, under a header row of the column names. Numbers are in plain units
// (bytes, seconds, fractions); an unknown value is an empty cell, never 0. The
// output is RFC 4180 (encoding/csv), so spreadsheets open it as is.
func WriteCSV(w io.Writer, runs []Run) error {
	cols := Columns()
	cw := csv.NewWriter(w)
	rec := make([]string, len(cols))
	for j, c := range cols {
		rec[j] = c.Name
	}
	if err := cw.Write(rec); err != nil {
		return err
	}
	for i := range runs {
		for j := range cols {
			rec[j] = plainValue(cols[j].Value(&runs[i]))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ExportedRun is one element of WriteJSON's array: the run's config (run_args.json),
// metrics (metrics.json) and derived figures, under the same names as on disk.
type ExportedRun struct {
	Config  sweeps.RunConfig `json:"config"`
	Metrics Metrics          `json:"metrics"`
	Derived Derived          `json:"derived"`
}

// WriteJSON writes the runs as a JSON array of {config, metrics, derived}.
func WriteJSON(w io.Writer, runs []Run) error {
	out := make([]ExportedRun, len(runs))
	for i, r := range runs {
		out[i] = ExportedRun{Config: r.Config, Metrics: r.Metrics, Derived: r.Derived}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
