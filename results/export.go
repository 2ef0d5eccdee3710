package results

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"golang.org/x/perf/benchfmt"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// WriteCSV writes every run as one row with every column of the registry (Columns),
// in its order, under a header row of the column names. Numbers are in plain units
// (bytes, seconds, fractions); an unknown value is an empty cell, never 0. The
// output is RFC 4180 (encoding/csv), so spreadsheets open it as is.
func WriteCSV(w io.Writer, runs []Run) error {
	// The spec's env.NAME and varied backend_options.NAME axes follow the
	// registry's columns (none for runs without them).
	cols := append(Columns(), DynamicColumns(runs)...)
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
		// A figure JSON cannot hold (or that no run can have) is refused by name,
		// before anything is written.
		if err := CheckRun(&runs[i]); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		out[i] = ExportedRun{Config: r.Config, Metrics: r.Metrics, Derived: r.Derived}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// ReadJSON reads what WriteJSON wrote: the runs with their config, metrics
// and derived figures as exported, each checked as Load checks a stored run
// (CheckRun), so a program reading an export gets what the tables showed,
// marks included. Call Derive to recompute the derived figures from the runs
// read.
func ReadJSON(r io.Reader) ([]Run, error) {
	var in []ExportedRun
	if err := json.NewDecoder(r).Decode(&in); err != nil {
		return nil, fmt.Errorf("read export: %w", err)
	}
	runs := make([]Run, len(in))
	for i, e := range in {
		runs[i] = Run{Config: e.Config, Metrics: e.Metrics, Derived: e.Derived}
		if err := CheckRun(&runs[i]); err != nil {
			return nil, fmt.Errorf("read export: run %d: %w", i, err)
		}
	}
	return runs, nil
}

// benchfmtAxes name a run in benchfmt output: the training axes, as benchstat's
// sub-benchmark keys (so `benchstat -col /sharding` works). Where and how a run was
// launched goes to file configuration lines instead.
var benchfmtAxes = []string{"world_size", "nodes", "gpus_per_node", "batch_per_device", "grad_accum", "global_batch",
	"seq_len", "sharding", "activation_checkpointing", "backward_prefetch", "forward_prefetch", "cpu_offload",
	"mixed_precision", "wrap_policy", "compile"}

// benchfmtUnit is one figure of benchfmt output.
type benchfmtUnit struct {
	sample, unit, better string
	headline             func(*Metrics) *float64
}

// benchfmtUnits are the figures WriteBenchfmt writes: the per-repeat sample name,
// the benchfmt unit, which direction is better, and the run's headline value.
var benchfmtUnits = []benchfmtUnit{
	{SampleTokensPerSPerRank, "tokens/s/rank", "higher", func(m *Metrics) *float64 { return m.TokensPerSPerRank }},
	{SampleStepTimeS, "sec/step", "lower", func(m *Metrics) *float64 {
		if m.StepTimeS == nil {
			return nil
		}
		return F64(m.StepTimeS.Median)
	}},
	{SampleMFU, "mfu", "higher", func(m *Metrics) *float64 { return m.MFU }},
	{SamplePeakReserved, "peak-reserved-B", "lower", func(m *Metrics) *float64 {
		if m.PeakMemReservedBytes == nil {
			return nil
		}
		return F64(float64(*m.PeakMemReservedBytes))
	}},
}

// WriteBenchfmt writes the ok runs in the Go benchmark format
// (golang.org/x/perf/benchfmt), one line per repeat, so benchstat can compare two
// sweeps: `benchstat -col .file a.txt b.txt`. A run's name is "Train" with its
// training axes as keys (/world_size=4/sharding=full_shard/...); sweep, backend,
// hardware, model and GPU are file configuration, and so are a run's noise and
// warnings (Derived.Noise, Metrics.Warnings) where it has them. Runs that are not
// ok are left out (the format has no status); so are figures that are unknown.
func WriteBenchfmt(w io.Writer, runs []Run) error {
	bw := benchfmt.NewWriter(w)
	units := append(benchfmtUnits[:len(benchfmtUnits):len(benchfmtUnits)], checkpointUnits(runs)...)
	for _, u := range units {
		md := &benchfmt.UnitMetadata{UnitMetadataKey: benchfmt.UnitMetadataKey{Unit: u.unit, Key: "better"},
			OrigUnit: u.unit, Value: u.better}
		if err := bw.Write(md); err != nil {
			return err
		}
	}
	var axes []Column
	for _, name := range benchfmtAxes {
		c, err := LookupColumn(name, KindAxis)
		if err != nil {
			return err
		}
		axes = append(axes, c)
	}
	for i := range runs {
		r := &runs[i]
		if r.Metrics.Status != StatusOK {
			continue
		}
		var name strings.Builder
		name.WriteString("Train")
		for j := range axes {
			name.WriteString("/" + axes[j].Name + "=" + benchfmtText(plainValue(axes[j].Value(r))))
		}
		if r.Config.Checkpoints() {
			// Only runs that checkpoint carry the key, so names of the others stay as they were.
			name.WriteString("/checkpoint=" + r.Config.Checkpoint)
		}
		res := &benchfmt.Result{Name: benchfmt.Name(name.String()), Iters: max(r.Metrics.StepsMeasured, 1)}
		for _, kv := range [][2]string{{"sweep", r.Config.Sweep}, {"backend", r.Config.Backend},
			{"hardware", r.Config.Hardware}, {"model", r.Config.Model}, {"gpu", r.Metrics.Env.GPU}} {
			res.Config = append(res.Config, benchfmt.Config{Key: kv[0], Value: []byte(kv[1]), File: true})
		}
		// The marks of the tables, as file configuration that only marked runs
		// carry: benchstat's default tables (-table .config) then show a marked
		// run's figures under its own heading, saying why.
		for _, kv := range [][2]string{{"noise", r.Derived.Noise}, {"warnings", strings.Join(r.Metrics.Warnings, " | ")}} {
			if kv[1] != "" {
				res.Config = append(res.Config, benchfmt.Config{Key: kv[0], Value: []byte(strings.Join(strings.Fields(kv[1]), " ")), File: true})
			}
		}
		lines := 1
		for _, u := range units {
			lines = max(lines, len(r.Metrics.Samples[u.sample]))
		}
		for line := 0; line < lines; line++ {
			res.Values = res.Values[:0]
			for _, u := range units {
				var v *float64
				if s := r.Metrics.Samples[u.sample]; len(s) > 0 {
					if line < len(s) {
						v = F64(s[line])
					}
				} else if line == 0 {
					v = u.headline(&r.Metrics)
				}
				if v != nil {
					res.Values = append(res.Values, benchfmt.Value{Value: *v, Unit: u.unit})
				}
			}
			if len(res.Values) == 0 {
				continue
			}
			if err := bw.Write(res); err != nil {
				return err
			}
		}
	}
	return nil
}

// benchfmtText keeps a value from breaking a benchmark name (spaces end it, slashes
// split it).
func benchfmtText(s string) string {
	if s == "" {
		return "none"
	}
	return strings.NewReplacer(" ", "_", "/", "_").Replace(s)
}
