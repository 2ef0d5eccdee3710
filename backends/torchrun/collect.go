package torchrun

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/hardware"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// LegacyMetricsFile is the name of the metrics file existing scripts write.
const LegacyMetricsFile = "metrics.json"

// collector gathers what a finished run left behind, in the order of trust: the
// metrics contract's rank files, then the figures backend_options.logs reads from
// the output, then a metrics.json of the existing-scripts kind, then the
// FSDPBENCH step lines rank 0 printed.
type collector struct {
	rc        sweeps.RunConfig
	o         Options
	paths     contract.Paths
	vars      map[string]string
	stepLines []results.Step // from stdout, in order
	lines     *logLines      // the output lines backend_options.logs reads
	warn      func(string)   // a line for the run's stderr.log
}

// collect fills res from the run's outputs, or says why it cannot.
func (c *collector) collect(res *results.Result) error {
	ranks, err := contract.HasRankFiles(c.paths.MetricsDir)
	if err != nil {
		return err
	}
	switch {
	case ranks:
		if err := c.fromRankFiles(res); err != nil {
			return err
		}
	case c.o.Logs.enabled():
		x, err := extract(c.o.Logs, c.lines, c.rc.SeqLen)
		if err != nil {
			return err
		}
		if err := c.fromLogs(res, x); err != nil {
			return err
		}
	default:
		path, err := c.findLegacy()
		if err != nil {
			return err
		}
		switch {
		case path != "":
			if err := c.fromLegacy(res, path); err != nil {
				return err
			}
		case len(c.stepLines) > 0:
			if err := c.fromStepLines(res); err != nil {
				return err
			}
		default:
			return fmt.Errorf("torchrun: the script exited cleanly but reported nothing: no %s/rank-<r>.json, no %s, no FSDPBENCH lines on stdout; see the metrics contract in the README",
				c.paths.MetricsDir, LegacyMetricsFile)
		}
	}
	c.flops(res)
	if res.Status == "" {
		res.Status = results.StatusOK // the rank files may have said diverged
	}
	return nil
}

func (c *collector) fromRankFiles(res *results.Result) error {
	return contract.ReadRanks(res, c.rc, c.paths.MetricsDir, "torchrun")
}

// findLegacy returns the metrics.json a script wrote: metrics_file when set, else
// the one metrics.json under the run's output directory (or "" when none is).
func (c *collector) findLegacy() (string, error) {
	if c.o.MetricsFile != "" {
		p, err := contract.Expand("backend_options.metrics_file", []string{c.o.MetricsFile}, c.vars)
		if err != nil {
			return "", err
		}
		path := p[0]
		if !filepath.IsAbs(path) {
			path = filepath.Join(c.paths.OutputDir, path)
		}
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("torchrun: backend_options.metrics_file %s: %w", path, err)
		}
		return path, nil
	}
	var found []string
	err := filepath.WalkDir(c.paths.OutputDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == LegacyMetricsFile {
			found = append(found, path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return found[0], nil
	default:
		sort.Strings(found)
		return "", fmt.Errorf("torchrun: the script wrote %d metrics.json files (%s); set backend_options.metrics_file to the one that holds the run's figures",
			len(found), strings.Join(found, ", "))
	}
}

// legacyKeys are the metrics.json keys existing scripts use (DESIGN.md, results).
var legacyKeys = []string{"wall_time_s", "approx_tokens_per_rank", "approx_tokens_per_s_per_rank", "world_size",
	"gpu0", "torch", "model", "dataset", "fsdp", "bf16"}

// fromLegacy maps a metrics.json with the existing scripts' key names onto the
// result: wall_time_s is the measured wall time, approx_tokens_per_rank each rank's
// tokens (or approx_tokens_per_s_per_rank x wall_time_s), and world_size, fsdp
// and bf16 must agree with the run's axes: a script that ignored the template
// would otherwise file its figures under the wrong configuration.
func (c *collector) fromLegacy(res *results.Result, path string) error {
	data, err := input.ReadJSON(path, input.Metrics)
	if err != nil {
		return err
	}
	var m map[string]any
	nonFinite, err := contract.DecodeJSON(path, data, &m)
	if err != nil {
		return fmt.Errorf("torchrun: %w (a metrics.json must be one JSON object)", err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("torchrun: %s: %s", path, fmt.Sprintf(format, a...))
	}
	// Python writes NaN and Infinity bare; a figure we read must be finite, the
	// script's other keys are kept as the text Python wrote.
	var odd []string
	for _, nf := range nonFinite {
		if slices.Contains(legacyKeys, nf.Field) {
			return fmt.Errorf("torchrun: %s: %s is %v; it must be a finite number", nf.Pos, nf.Field, nf.Value)
		}
		if _, top := m[nf.Field]; top {
			m[nf.Field] = strconv.FormatFloat(nf.Value, 'g', -1, 64)
		} else {
			odd = append(odd, nf.Field+"="+strconv.FormatFloat(nf.Value, 'g', -1, 64))
		}
	}
	number := func(k string, hi float64) (float64, bool, error) {
		v, ok := m[k]
		if !ok || v == nil {
			return 0, false, nil
		}
		x, isNum := v.(float64)
		if !isNum {
			return 0, false, bad("%s must be a number, got %v", k, v)
		}
		if err := backends.CheckFigure(k, x, 0, hi, false); err != nil {
			return 0, false, bad("%v", err)
		}
		return x, true, nil
	}
	wall, hasWall, err := number("wall_time_s", backends.MaxWallS)
	if err != nil {
		return err
	}
	tokens, hasTokens, err := number("approx_tokens_per_rank", backends.MaxTokens)
	if err != nil {
		return err
	}
	tps, hasTPS, err := number("approx_tokens_per_s_per_rank", backends.MaxTokens)
	if err != nil {
		return err
	}
	switch {
	case hasWall && hasTokens:
		if hasTPS && wall > 0 && math.Abs(tokens/wall-tps) > 0.01*tps {
			c.warn(fmt.Sprintf("fsdpbench: %s: approx_tokens_per_s_per_rank %.4g differs from approx_tokens_per_rank/wall_time_s = %.4g; the table uses the latter (DESIGN.md normalization); the script's figure is kept as extra.script_tokens_per_s_per_rank",
				path, tps, tokens/wall))
		}
	case hasWall && hasTPS:
		tokens = tps * wall
	case hasTokens && hasTPS && tps > 0:
		wall = tokens / tps
	default:
		return bad("needs two of wall_time_s, approx_tokens_per_rank, approx_tokens_per_s_per_rank to give a throughput; it has %s", presentKeys(m))
	}
	if err := backends.CheckTime("wall_time_s", wall, backends.MaxWallS); err != nil {
		return bad("%v; a throughput needs a positive wall time", err)
	}
	if v, ok := m["world_size"]; ok {
		if ws, isNum := v.(float64); !isNum || ws != float64(c.rc.WorldSize) {
			return bad("world_size is %v but the run has %d ranks: the script did not run this configuration", v, c.rc.WorldSize)
		}
	}
	if v, ok := m["fsdp"].(bool); ok {
		// no_shard is FSDP's NO_SHARD as well as DDP-like, so it agrees with either.
		if c.rc.Sharding != sweeps.NoShard && v != (c.rc.Sharding != sweeps.DDP) {
			return bad("fsdp is %v but the run's sharding is %s: map the sharding axis in backend_options.args (e.g. {fsdp?--fsdp})", v, c.rc.Sharding)
		}
	}
	if v, ok := m["bf16"].(bool); ok && v != (c.rc.MixedPrecision == sweeps.BF16) {
		return bad("bf16 is %v but the run's mixed_precision is %s: map it in backend_options.args (e.g. {bf16?--bf16})", v, c.rc.MixedPrecision)
	}
	res.MeasuredWallS = wall
	res.Steps = c.stepLines
	for i := range res.Steps {
		res.Steps[i].Tokens = c.rc.TokensPerStep()
	}
	for r := range c.rc.WorldSize {
		res.PerRank = append(res.PerRank, results.RankResult{Rank: r, MeasuredWallS: wall, Tokens: int64(math.Round(tokens))})
	}
	switch g := m["gpu0"].(type) {
	case string:
		if g != "cpu" {
			res.Env.GPU = g
		}
	case map[string]any:
		if name, ok := g["name"].(string); ok {
			res.Env.GPU = name
		}
	}
	if t, ok := m["torch"].(string); ok && t != "" {
		res.Env.Torch = t
	}
	res.Extra = map[string]any{"metrics_file": path}
	if len(odd) > 0 {
		res.Extra["non_finite"] = odd
	}
	for k, v := range m {
		switch k {
		case "wall_time_s", "approx_tokens_per_rank", "world_size", "torch":
		case "approx_tokens_per_s_per_rank":
			res.Extra["script_tokens_per_s_per_rank"] = v
		default:
			res.Extra[k] = v // model, dataset, gpu0, fsdp, bf16 and the script's own keys, as they are
		}
	}
	return nil
}

func presentKeys(m map[string]any) string {
	var have []string
	for _, k := range legacyKeys {
		if _, ok := m[k]; ok {
			have = append(have, k)
		}
	}
	if len(have) == 0 {
		return "none of " + strings.Join(legacyKeys, ", ")
	}
	return strings.Join(have, ", ")
}

// fromStepLines uses rank 0's FSDPBENCH lines alone: the wall time is the sum of
// the step times, and every rank is assumed to have done rank 0's share.
func (c *collector) fromStepLines(res *results.Result) error {
	if len(c.stepLines) > c.rc.Steps {
		return fmt.Errorf("torchrun: the script printed %d FSDPBENCH step lines but the run measures %d steps: print one line per measured step, from rank 0 only (warm-up steps are not reported)",
			len(c.stepLines), c.rc.Steps)
	}
	res.Steps = c.stepLines
	for i := range res.Steps {
		res.Steps[i].Tokens = c.rc.TokensPerStep()
		res.MeasuredWallS += res.Steps[i].StepTimeS
	}
	return nil
}

// flops sets the model FLOPs per token (reported by the script, or from the shape
// of the model axis when the script trains it) and the device's peak (the
// hardware profile), which together give MFU.
func (c *collector) flops(res *results.Result) {
	if shape, err := shapes.Lookup(c.rc.Model); err == nil && c.o.TrainsModelAxis {
		if res.ModelFlopsPerToken == 0 {
			res.ModelFlopsPerToken = shape.FlopsPerToken(c.rc.SeqLen)
		}
		res.Env.ModelParams = shape.Params()
	}
	if res.ModelFlopsPerToken == 0 {
		return // MFU unknown; the peak alone says nothing
	}
	name := c.rc.Hardware
	if res.Env.Hardware == "cpu" {
		name = "cpu"
	}
	var prof hardware.Profile
	if name == hardware.Auto || name == "" {
		p, _ := hardware.Detect()
		if p.Name == "" || p.Name == "cpu" {
			// A GPU we have no profile for, or detection without a driver: the
			// peak is unknown, so MFU stays absent rather than wrong.
			return
		}
		prof = p
	} else {
		p, err := hardware.Lookup(name)
		if err != nil {
			return
		}
		prof = p
	}
	if peak, err := prof.Peak(c.rc.MixedPrecision); err == nil {
		res.PeakFlopsPerS = peak
		res.Env.Hardware = prof.Name
	}
}

// LegacyResult reads a metrics.json written with the existing scripts' key names
// (see fromLegacy) as the result of rc, for `fsdpbench ingest`; warn receives
// notes about figures that disagree. trainsModel says the model axis is the model
// the script trained, so MFU may be computed from its shape.
func LegacyResult(rc sweeps.RunConfig, path string, trainsModel bool, warn func(string)) (results.Result, error) {
	res := results.Result{WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode, TokensPerStep: rc.TokensPerStep()}
	if warn == nil {
		warn = func(string) {}
	}
	c := collector{rc: rc, o: Options{TrainsModelAxis: trainsModel}, warn: warn}
	if err := c.fromLegacy(&res, path); err != nil {
		return res, err
	}
	c.flops(&res)
	res.Status = results.StatusOK
	return res, nil
}
