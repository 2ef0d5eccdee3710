package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// StepPrefix starts a step line on a script's stdout: "FSDPBENCH {json}".
const StepPrefix = "FSDPBENCH "

// Environment variables a launched script is given.
const (
	EnvMetricsDir = "FSDPBENCH_METRICS_DIR"
	EnvRunDir     = "FSDPBENCH_RUN_DIR"
	EnvOutputDir  = "FSDPBENCH_OUTPUT_DIR"
	EnvRunID      = "FSDPBENCH_RUN_ID"
)

// Exit codes a script may use to say how a run ended (besides 0 and a crash).
const (
	ExitInfeasible = 3 // the configuration cannot run here; the reason is on stderr
	ExitOOM        = 4 // out of memory
)

// RankFile is what each rank writes to $FSDPBENCH_METRICS_DIR/rank-<r>.json. Only
// rank, tokens, measured_wall_s and steps are required; the rest is reported when
// known.
type RankFile struct {
	Rank                  int            `json:"rank"`
	WorldSize             int            `json:"world_size"`
	Device                string         `json:"device"`
	Tokens                int64          `json:"tokens"`
	MeasuredWallS         float64        `json:"measured_wall_s"`
	Steps                 []results.Step `json:"steps"`
	Torch                 string         `json:"torch"`
	GPU                   string         `json:"gpu"`
	CUDA                  string         `json:"cuda"`
	NCCL                  string         `json:"nccl"`
	Host                  string         `json:"host"`
	ModelFlopsPerToken    float64        `json:"model_flops_per_token"`
	PeakMemAllocatedBytes *int64         `json:"peak_mem_allocated_bytes"`
	PeakMemReservedBytes  *int64         `json:"peak_mem_reserved_bytes"`
	PeakRSSBytes          *int64         `json:"peak_rss_bytes"`
	AllocRetries          *int64         `json:"alloc_retries"`
	CUDAOOMs              *int64         `json:"cuda_ooms"`
	// SpecEnv is the spec's variables (env:) as the rank's process saw them.
	SpecEnv map[string]string `json:"spec_env,omitempty"`
	CheckpointFigures
}

// HasRankFiles reports whether dir holds any rank file.
func HasRankFiles(dir string) (bool, error) {
	m, err := filepath.Glob(filepath.Join(dir, "rank-*.json"))
	return len(m) > 0, err
}

// ReadRanks reads every rank's file of rc from dir into res: the steps as the
// slowest rank saw them, the wall time and peaks of the highest rank, each rank's
// own figures in PerRank, and the environment rank 0 reported. who names the
// launcher in errors ("torchrun", "exec"). Every figure is checked as it is read
// (finite, within backends' bounds, step times positive): an error names the file,
// line, column and field. A loss that is NaN or infinite (Python's json.dump
// writes bare NaN for a diverged run) is no error: res.Status is then
// results.StatusDiverged with the first such loss in res.Error, and the caller
// keeps that status.
func ReadRanks(res *results.Result, rc sweeps.RunConfig, dir, who string) error {
	files := make([]RankFile, rc.WorldSize)
	var div *divergence
	for r := range files {
		path := filepath.Join(dir, "rank-"+strconv.Itoa(r)+".json")
		data, err := input.ReadJSON(path, input.Metrics)
		if err != nil {
			return fmt.Errorf("%s: rank %d exited cleanly but its report is missing: %w", who, r, err)
		}
		bad, err := DecodeJSON(path, data, &files[r])
		if err != nil {
			return fmt.Errorf("%s: rank %d's report %w", who, r, err)
		}
		for _, nf := range bad {
			i, isLoss := lossIndex(nf.Field)
			if !isLoss || i >= len(files[r].Steps) {
				return fmt.Errorf("%s: rank %d's report %s: %s is %v; it must be a finite number", who, r, nf.Pos, nf.Field, nf.Value)
			}
			files[r].Steps[i].Loss = nil // unknown: JSON cannot hold it, the error says it
			if div == nil || i < div.step {
				div = &divergence{rank: r, step: i, value: nf.Value, pos: nf.Pos, steps: files[r].Steps}
			}
		}
		if err := checkRankFile(rc, files[r], r); err != nil {
			if i, missing := missingStepTime(path, data, files[r].Steps); missing &&
				strings.HasPrefix(err.Error(), fmt.Sprintf("steps[%d].step_time_s is 0;", i)) {
				err = fmt.Errorf("steps[%d].step_time_s is missing: each step gives its time in seconds", i)
			}
			return fmt.Errorf("%s: rank %d's report %s: %w", who, r, path, err)
		}
	}
	res.Steps = make([]results.Step, rc.Steps)
	for i := range res.Steps {
		st := files[0].Steps[i]
		st.Tokens = rc.TokensPerStep()
		for _, f := range files[1:] {
			st.StepTimeS = max(st.StepTimeS, f.Steps[i].StepTimeS)
		}
		res.Steps[i] = st
	}
	var retries, ooms *int64
	for _, f := range files {
		res.MeasuredWallS = max(res.MeasuredWallS, f.MeasuredWallS)
		res.PeakMemAllocatedBytes = maxPtr(res.PeakMemAllocatedBytes, f.PeakMemAllocatedBytes)
		res.PeakMemReservedBytes = maxPtr(res.PeakMemReservedBytes, f.PeakMemReservedBytes)
		res.PeakRSSBytes = maxPtr(res.PeakRSSBytes, f.PeakRSSBytes)
		retries = maxPtr(retries, f.AllocRetries)
		ooms = maxPtr(ooms, f.CUDAOOMs)
		var loss *float64
		if n := len(f.Steps); n > 0 {
			loss = f.Steps[n-1].Loss
		}
		res.PerRank = append(res.PerRank, results.RankResult{Rank: f.Rank, Host: f.Host, MeasuredWallS: f.MeasuredWallS,
			Tokens: f.Tokens, PeakMemAllocatedBytes: f.PeakMemAllocatedBytes, PeakMemReservedBytes: f.PeakMemReservedBytes,
			PeakRSSBytes: f.PeakRSSBytes, LossLast: loss})
	}
	if retries != nil || ooms != nil {
		if res.Extra == nil {
			res.Extra = map[string]any{}
		}
		if retries != nil {
			res.Extra["alloc_retries"] = *retries
		}
		if ooms != nil {
			res.Extra["cuda_ooms"] = *ooms
		}
	}
	readCheckpoint(res, files)
	if len(res.Env.Hosts) == 0 {
		// The nodes the ranks ran on, as gotrain reports them (sorted, once each).
		for _, f := range files {
			if f.Host != "" && !slices.Contains(res.Env.Hosts, f.Host) {
				res.Env.Hosts = append(res.Env.Hosts, f.Host)
			}
		}
		slices.Sort(res.Env.Hosts)
	}
	f0 := files[0]
	if div != nil {
		res.Status, res.Error = results.StatusDiverged, div.String()
	}
	res.ModelFlopsPerToken = f0.ModelFlopsPerToken
	res.Env.GPU, res.Env.CUDA, res.Env.NCCL = f0.GPU, f0.CUDA, f0.NCCL
	if f0.Torch != "" {
		res.Env.Torch = f0.Torch
	}
	if f0.Device == "cpu" {
		res.Env.Hardware = "cpu"
	}
	return nil
}

// divergence is the first loss that was not finite.
type divergence struct {
	rank, step int
	value      float64
	pos        string
	steps      []results.Step
}

func (d divergence) String() string {
	msg := fmt.Sprintf("diverged: rank %d's loss is %v at measured step %d of %d (steps[%d].loss, %s)",
		d.rank, d.value, d.step+1, len(d.steps), d.step, d.pos)
	for i := d.step - 1; i >= 0; i-- {
		if l := d.steps[i].Loss; l != nil {
			return msg + fmt.Sprintf("; the last finite loss was %.4g at step %d", *l, i+1)
		}
	}
	return msg
}

// lossIndex reads "steps[<i>].loss".
func lossIndex(field string) (int, bool) {
	rest, ok := strings.CutPrefix(field, "steps[")
	if !ok {
		return 0, false
	}
	num, tail, ok := strings.Cut(rest, "]")
	if !ok || tail != ".loss" {
		return 0, false
	}
	i, err := strconv.Atoi(num)
	return i, err == nil && i >= 0
}

// missingStepTime finds, for a report that checkRankFile refused, the first
// step whose step_time_s is absent (decoded as 0): its error then says
// "missing" rather than "is 0", which reads as a time the script measured. Only
// a refused report is decoded again.
func missingStepTime(path string, data []byte, steps []results.Step) (int, bool) {
	if !slices.ContainsFunc(steps, func(st results.Step) bool { return st.StepTimeS == 0 }) {
		return 0, false
	}
	var given struct {
		Steps []struct {
			StepTimeS *float64 `json:"step_time_s"`
		} `json:"steps"`
	}
	if _, err := DecodeJSON(path, data, &given); err != nil {
		return 0, false
	}
	for i, st := range given.Steps {
		if st.StepTimeS == nil {
			return i, true
		}
	}
	return 0, false
}

// checkRankFile checks one rank's figures as they enter.
func checkRankFile(rc sweeps.RunConfig, f RankFile, r int) error {
	switch {
	case f.Rank != r:
		return fmt.Errorf("rank is %d, but the file is rank %d's", f.Rank, r)
	case f.WorldSize != 0 && f.WorldSize != rc.WorldSize:
		return fmt.Errorf("world_size is %d but the run has %d ranks: the script did not run this configuration", f.WorldSize, rc.WorldSize)
	case len(f.Steps) != rc.Steps:
		return fmt.Errorf("steps holds %d measured steps, want %d (steps: in the spec; warm-up steps are not reported)", len(f.Steps), rc.Steps)
	}
	if f.SpecEnv != nil {
		// The rank says what it received of the spec's variables: a value
		// that did not arrive (a launcher, a wrapper, a site profile changed
		// it) means the run measured another configuration than asked.
		for _, k := range slices.Sorted(maps.Keys(rc.Env)) {
			if got, ok := f.SpecEnv[k]; !ok || got != rc.Env[k] {
				return fmt.Errorf("spec_env: the rank's process had %s=%s, but the spec gives %s: something between fsdpbench and the rank changed it",
					k, strconv.Quote(clipEnv(got)), strconv.Quote(clipEnv(rc.Env[k])))
			}
		}
	}
	for _, t := range []struct{ field, v string }{{"device", f.Device}, {"torch", f.Torch}, {"gpu", f.GPU},
		{"cuda", f.CUDA}, {"nccl", f.NCCL}, {"host", f.Host}} {
		if len(t.v) > maxName {
			return fmt.Errorf("%s is %d bytes long; a name holds at most %d", t.field, len(t.v), maxName)
		}
	}
	type figure struct {
		field     string
		v, lo, hi float64
		positive  bool
	}
	figures := []figure{
		{"tokens", float64(f.Tokens), 0, backends.MaxTokens, false},
		{"model_flops_per_token", f.ModelFlopsPerToken, 0, backends.MaxFlopsPerToken, false},
	}
	for _, p := range []struct {
		field string
		v     *int64
	}{{"peak_mem_allocated_bytes", f.PeakMemAllocatedBytes}, {"peak_mem_reserved_bytes", f.PeakMemReservedBytes},
		{"peak_rss_bytes", f.PeakRSSBytes}, {"alloc_retries", f.AllocRetries}, {"cuda_ooms", f.CUDAOOMs}} {
		if p.v != nil {
			figures = append(figures, figure{p.field, float64(*p.v), 0, backends.MaxBytes, false})
		}
	}
	if f.MeasuredWallS != 0 { // 0: not reported
		if err := backends.CheckTime("measured_wall_s", f.MeasuredWallS, backends.MaxWallS); err != nil {
			return err
		}
	}
	for i, st := range f.Steps {
		if err := backends.CheckTime(fmt.Sprintf("steps[%d].step_time_s", i), st.StepTimeS, backends.MaxStepTimeS); err != nil {
			return err
		}
	}
	for _, fig := range figures {
		if err := backends.CheckFigure(fig.field, fig.v, fig.lo, fig.hi, fig.positive); err != nil {
			return err
		}
	}
	return checkCheckpoint(rc, f.CheckpointFigures)
}

func maxPtr(cur, v *int64) *int64 {
	if v == nil || (cur != nil && *cur >= *v) {
		return cur
	}
	return results.I64(*v)
}

// StepLine is one step line: a measured step and the rank that printed it.
type StepLine struct {
	results.Step
	Rank int `json:"rank"`
	// Diverged is set when the line's loss was NaN or infinite (Step.Loss is then
	// nil): what it was and where, for the run's error.
	Diverged string `json:"-"`
}

// Bounds of a step line's step and rank, and of a name a rank file gives (a host,
// a GPU, a version): past them the report is garbage.
const (
	maxName       = 256
	maxStepNumber = 1 << 40
	maxRank       = 1 << 24
)

// ParseStepLine reads a "FSDPBENCH {json}" line (anywhere in the line: torchrun's
// --tee prefixes "[rank]:"): its first step record, as ParseStepLines reads each.
// ok is false for a line that is no step line; err is set for one that is, but
// broken: its JSON (with line:column in the line), or a figure out of bounds (a
// step below 1, a step time that is not a positive number of seconds). A NaN or
// infinite loss is no error: see StepLine.Diverged.
func ParseStepLine(line string) (st StepLine, ok bool, err error) {
	i := strings.Index(line, StepPrefix)
	if i < 0 {
		return st, false, nil
	}
	end := recordEnd(line, i)
	open, ok := recordOpen(line, i, end)
	if !ok {
		return st, false, nil
	}
	if err := LineTooLong("step line", line); err != nil {
		return st, false, err
	}
	st, err = parseStepRecord(line, open, end)
	return st, err == nil, err
}

// ParseStepLines reads every step record in one stdout line. The ranks of a
// launcher share its stdout, and Python's print writes the text and its newline
// in two writes (unbuffered, as under python -u), so two ranks printing at once
// read back as "FSDPBENCH {a}FSDPBENCH {b}" and an empty line, and a record can
// be followed on its line by another rank's text: each record ends at the end of
// its JSON object, or at the next prefix. Each record gives a step or an error,
// in the order they appear; a line that was cut gives one error.
func ParseStepLines(line string) (sts []StepLine, errs []error) {
	checked := false
	for from := 0; ; {
		i := strings.Index(line[from:], StepPrefix)
		if i < 0 {
			return sts, errs
		}
		start := from + i
		end := recordEnd(line, start)
		from = end
		open, ok := recordOpen(line, start, end)
		if !ok {
			continue
		}
		if !checked { // once: LineTooLong reads the whole line
			checked = true
			if err := LineTooLong("step line", line); err != nil {
				return sts, []error{err}
			}
		}
		if st, err := parseStepRecord(line, open, end); err != nil {
			errs = append(errs, err)
		} else {
			sts = append(sts, st)
		}
	}
}

// recordEnd is where the step record that starts at start ends at the latest:
// at the next prefix, or at the end of the line.
func recordEnd(line string, start int) int {
	after := start + len(StepPrefix)
	if j := strings.Index(line[after:], StepPrefix); j >= 0 {
		return after + j
	}
	return len(line)
}

// recordOpen is where the JSON object of the record in line[start:end] opens;
// ok is false when the prefix is followed by no object ("FSDPBENCH done").
func recordOpen(line string, start, end int) (open int, ok bool) {
	open = start + len(StepPrefix)
	open += len(line[open:end]) - len(strings.TrimLeft(line[open:end], " \t"))
	return open, strings.HasPrefix(line[open:end], "{")
}

// parseStepRecord reads the record whose object opens at line[open] and ends by
// end; what follows the object (another rank's text) is no part of it. Only the
// record is read (a line of many records is read once, not once per record),
// and positions count in the whole line.
func parseStepRecord(line string, open, end int) (st StepLine, err error) {
	data := []byte(line[open:end])
	data = data[:jsonValueEnd(data)]
	// A flat copy of StepLine, so type errors name the fields as the line has them.
	// step and step_time_s are pointers: one that is absent (or null) is
	// missing, which says more than the 0 it would decode as.
	var wire struct {
		Step      *int     `json:"step"`
		Loss      *float64 `json:"loss"`
		StepTimeS *float64 `json:"step_time_s"`
		Tokens    int64    `json:"tokens"`
		Rank      int      `json:"rank"`
	}
	bad, err := decodeJSONAt("step line", data, open, &wire)
	if err != nil {
		return st, fmt.Errorf("%w: %s", err, quoteLine(line))
	}
	for _, f := range []struct {
		name, what string
		missing    bool
	}{{"step", "the measured step's number, from 1", wire.Step == nil}, {"step_time_s", "the step's time in seconds", wire.StepTimeS == nil}} {
		if f.missing {
			return st, fmt.Errorf("step line: %s is missing: give %s, as in %s: %s",
				f.name, f.what, `FSDPBENCH {"step": 1, "loss": 5.1, "step_time_s": 0.31}`, quoteLine(line))
		}
	}
	st = StepLine{Step: results.Step{Step: *wire.Step, Loss: wire.Loss, StepTimeS: *wire.StepTimeS, Tokens: wire.Tokens}, Rank: wire.Rank}
	for _, nf := range bad {
		if nf.Field != "loss" {
			return st, fmt.Errorf("%s: %s is %v; it must be a finite number: %s", nf.Pos, nf.Field, nf.Value, quoteLine(line))
		}
		st.Loss = nil
		st.Diverged = fmt.Sprintf("loss is %v at step %d (rank %d's step line, %s)", nf.Value, st.Step.Step, st.Rank, nf.Pos)
	}
	if err := checkStepLine(st); err != nil {
		return st, fmt.Errorf("step line: %w: %s", err, quoteLine(line))
	}
	return st, nil
}

func checkStepLine(st StepLine) error {
	switch {
	case st.Step.Step < 1 || st.Step.Step > maxStepNumber:
		return fmt.Errorf("step is %d; measured steps count from 1", st.Step.Step)
	case st.Rank < 0 || st.Rank > maxRank:
		return fmt.Errorf("rank is %d", st.Rank)
	}
	if err := backends.CheckTime("step_time_s", st.StepTimeS, backends.MaxStepTimeS); err != nil {
		return err
	}
	return backends.CheckFigure("tokens", float64(st.Tokens), 0, backends.MaxTokens, false)
}

// quoteLine quotes a line for an error, cut short when long.
func quoteLine(line string) string {
	const maxQuoted = 200
	if len(line) > maxQuoted {
		return strconv.Quote(line[:maxQuoted]) + "..."
	}
	return strconv.Quote(line)
}

// VisibleDevices is CUDA_VISIBLE_DEVICES for the devices assigned to a run. The
// indices count the devices fsdpbench itself sees, so when fsdpbench runs under a
// CUDA_VISIBLE_DEVICES of its own (a Slurm allocation, a shared box), index i is
// the i-th entry of that list, not physical GPU i.
func VisibleDevices(devices []int, parent string) string {
	var visible []string
	if parent = strings.TrimSpace(parent); parent != "" {
		visible = strings.Split(parent, ",")
	}
	ids := make([]string, len(devices))
	for i, d := range devices {
		if d < len(visible) {
			ids[i] = strings.TrimSpace(visible[d])
		} else {
			ids[i] = strconv.Itoa(d)
		}
	}
	return strings.Join(ids, ",")
}

// JSONPos is path:line:col of a JSON syntax or type error in data (a metrics
// file), or path for any other error, so a message can point an editor at the spot.
func JSONPos(path string, data []byte, err error) string {
	return jsonPosAt(path, data, 0, err)
}

// jsonPosAt is JSONPos for data that starts col0 bytes into path's first line.
func jsonPosAt(path string, data []byte, col0 int, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		// Offset counts the bytes read, the offending one included.
		return posAt(path, data, col0, int(se.Offset)-1)
	case errors.As(err, &te):
		return posAt(path, data, col0, valueStart(data, int(te.Offset)))
	}
	return path
}

// valueStart is the offset where the value that ends at end (as
// json.UnmarshalTypeError reports it) begins: after '{' or '[' for a container,
// the opening quote of a string, the first byte of a number or literal.
func valueStart(data []byte, end int) int {
	end = min(max(end, 0), len(data))
	if end == 0 {
		return 0
	}
	switch data[end-1] {
	case '{', '[':
		return end - 1
	case '"':
		for i := end - 2; i >= 0; i-- {
			if data[i] != '"' {
				continue
			}
			bs := 0
			for j := i - 1; j >= 0 && data[j] == '\\'; j-- {
				bs++
			}
			if bs%2 == 0 {
				return i
			}
		}
		return 0
	}
	i := end - 1
	for i > 0 && !strings.ContainsRune(" \t\r\n:,[", rune(data[i-1])) {
		i--
	}
	return i
}

// clipEnv shortens a variable's value for a message.
func clipEnv(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
