package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

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
}

// HasRankFiles reports whether dir holds any rank file.
func HasRankFiles(dir string) (bool, error) {
	m, err := filepath.Glob(filepath.Join(dir, "rank-*.json"))
	return len(m) > 0, err
}

// ReadRanks reads every rank's file of rc from dir into res: the steps as the
// slowest rank saw them, the wall time and peaks of the highest rank, each rank's
// own figures in PerRank, and the environment rank 0 reported. who names the
// launcher in errors ("torchrun", "exec").
func ReadRanks(res *results.Result, rc sweeps.RunConfig, dir, who string) error {
	files := make([]RankFile, rc.WorldSize)
	for r := range files {
		path := filepath.Join(dir, "rank-"+strconv.Itoa(r)+".json")
		data, err := input.ReadJSON(path, input.Metrics)
		if err != nil {
			return fmt.Errorf("%s: rank %d exited cleanly but its report is missing: %w", who, r, err)
		}
		if err := json.Unmarshal(data, &files[r]); err != nil {
			return fmt.Errorf("%s: rank %d's report %s: %w", who, r, path, err)
		}
		if files[r].Rank != r {
			return fmt.Errorf("%s: %s says rank %d", who, path, files[r].Rank)
		}
		if len(files[r].Steps) != rc.Steps {
			return fmt.Errorf("%s: rank %d reported %d measured steps, want %d", who, r, len(files[r].Steps), rc.Steps)
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
	f0 := files[0]
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
}

// ParseStepLine reads a "FSDPBENCH {json}" line (anywhere in the line: torchrun's
// --tee prefixes "[rank]:").
func ParseStepLine(line string) (StepLine, bool) {
	var st StepLine
	i := strings.Index(line, StepPrefix)
	if i < 0 {
		return st, false
	}
	if json.Unmarshal([]byte(line[i+len(StepPrefix):]), &st) != nil || st.Step.Step <= 0 {
		return st, false
	}
	return st, true
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

// JSONPos is path:line:col of a JSON syntax error in data (a metrics file), or
// path for any other error, so a message can point an editor at the spot.
func JSONPos(path string, data []byte, err error) string {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return path
	}
	// Offset counts the bytes read, the offending one included.
	off := min(max(int(se.Offset)-1, 0), len(data))
	line := 1 + strings.Count(string(data[:off]), "\n")
	col := off - strings.LastIndexByte(string(data[:off]), '\n')
	return fmt.Sprintf("%s:%d:%d", path, line, col)
}
