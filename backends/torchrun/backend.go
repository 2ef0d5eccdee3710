package torchrun

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/hardware"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Name is the backend's name in specs and the registry.
const Name = "torchrun"

// DefaultPython is Debian's interpreter, the one python3-torch installs torch for.
const DefaultPython = "/usr/bin/python3"

// killGrace is how long torchrun has between SIGTERM and SIGKILL.
const killGrace = 3 * time.Second

// stepPrefix marks the script's step lines on stdout.
const stepPrefix = "FSDPBENCH "

// Markers the script (and torch) print on stderr; torchrun exits 1 whatever its
// children's codes were, so the outcome is read from the text.
const (
	infeasibleMarker = "fsdpbench: infeasible: "
	oomMarker        = "fsdpbench: out of memory"
)

//go:embed python/fsdpbench_train.py
var trainScript []byte

// Options are the torchrun backend_options.
type Options struct {
	// Python is the interpreter that has torch (default /usr/bin/python3).
	Python string
	// Script replaces the embedded fsdpbench_train.py (a path).
	Script string
	// ExtraArgs are appended to the script's arguments.
	ExtraArgs []string
	// LR and WeightDecay are AdamW's, with the Go trainer's defaults (1e-3, 0.01) so
	// the two engines train alike unless told otherwise.
	LR, WeightDecay float64
}

// ParseOptions reads backend_options: python, script, extra_args (a list of
// strings), lr, weight_decay. Unknown keys are errors.
func ParseOptions(m map[string]any) (Options, error) {
	o := Options{Python: DefaultPython, LR: 1e-3, WeightDecay: 0.01}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		switch k {
		case "python", "script":
			s, ok := v.(string)
			if !ok || s == "" {
				return o, fmt.Errorf("torchrun: backend_options.%s must be a non-empty string, got %v", k, v)
			}
			if k == "python" {
				o.Python = s
			} else {
				o.Script = s
			}
		case "extra_args":
			list, ok := v.([]any)
			if !ok {
				return o, fmt.Errorf("torchrun: backend_options.extra_args must be a list of strings, got %T", v)
			}
			for i, a := range list {
				s, ok := a.(string)
				if !ok {
					return o, fmt.Errorf("torchrun: backend_options.extra_args[%d] must be a string, got %T", i, a)
				}
				o.ExtraArgs = append(o.ExtraArgs, s)
			}
		case "lr", "weight_decay":
			var x float64
			switch n := v.(type) {
			case float64:
				x = n
			case int:
				x = float64(n)
			case int64:
				x = float64(n)
			case uint64:
				x = float64(n)
			default:
				return o, fmt.Errorf("torchrun: backend_options.%s must be a number, got %T", k, v)
			}
			if k == "lr" {
				if !(x > 0) {
					return o, fmt.Errorf("torchrun: backend_options.lr must be positive, got %g", x)
				}
				o.LR = x
			} else {
				if !(x >= 0) {
					return o, fmt.Errorf("torchrun: backend_options.weight_decay must not be negative, got %g", x)
				}
				o.WeightDecay = x
			}
		default:
			return o, fmt.Errorf("torchrun: unknown backend_options key %q (known: python, script, extra_args, lr, weight_decay)", k)
		}
	}
	return o, nil
}

// torchInfo is what the configured python's torch says about itself.
type torchInfo struct {
	Version string `json:"version"`
	CUDA    bool   `json:"cuda"`
}

// Backend launches the project's PyTorch script under torchrun.
type Backend struct {
	mu     sync.Mutex
	probes map[string]probe
}

type probe struct {
	info torchInfo
	err  error
}

// New returns the torchrun backend.
func New() *Backend { return &Backend{probes: map[string]probe{}} }

// Name returns "torchrun".
func (*Backend) Name() string { return Name }

// torch asks python which torch it has (once per interpreter).
func (b *Backend) torch(ctx context.Context, python string) (torchInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.probes[python]; ok {
		return p.info, p.err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c",
		"import json, torch, numpy; print(json.dumps({'version': torch.__version__, 'cuda': torch.cuda.is_available()}))").CombinedOutput()
	var p probe
	if err != nil {
		p.err = fmt.Errorf("torchrun: %s cannot import torch and numpy (%v: %s); install them with `apt install python3-torch python3-numpy` or set backend_options.python",
			python, err, strings.TrimSpace(string(out)))
	} else if jerr := json.Unmarshal(out[strings.LastIndexByte(strings.TrimSpace(string(out)), '\n')+1:], &p.info); jerr != nil {
		p.err = fmt.Errorf("torchrun: %s printed an unreadable torch probe %q: %w", python, out, jerr)
	}
	if ctx.Err() == nil {
		b.probes[python] = p
	}
	return p.info, p.err
}

// Describe says whether Debian's python has torch, and on what.
func (b *Backend) Describe(ctx context.Context) (backends.Description, error) {
	d := backends.Description{
		Name:    Name,
		Summary: "PyTorch under torchrun: the project's reference trainer with DDP, and FSDP on CUDA",
		Source:  "builtin",
	}
	info, err := b.torch(ctx, DefaultPython)
	if err != nil {
		d.Reason = err.Error()
		return d, nil
	}
	d.Available = true
	if !info.CUDA {
		d.Axes = map[string][]string{
			"sharding":        {sweeps.DDP, sweeps.NoShard},
			"mixed_precision": {sweeps.FP32},
		}
	}
	return d, nil
}

// Validate refuses what this torch cannot run here, and what the script does not
// implement yet.
func (b *Backend) Validate(ctx context.Context, rc sweeps.RunConfig) error {
	o, err := ParseOptions(rc.BackendOptions)
	if err != nil {
		return err
	}
	if rc.WorldSize <= 0 || rc.Nodes != 1 || rc.GPUsPerNode != rc.WorldSize {
		return fmt.Errorf("torchrun: world_size %d over %d nodes: this backend runs one node (--standalone); set nodes: 1", rc.WorldSize, rc.Nodes)
	}
	if rc.SeqLen <= 0 || rc.BatchPerDevice <= 0 || rc.Steps <= 0 || rc.WarmupSteps < 0 {
		return fmt.Errorf("torchrun: seq_len %d, batch_per_device %d and steps %d must be positive, warmup_steps %d not negative",
			rc.SeqLen, rc.BatchPerDevice, rc.Steps, rc.WarmupSteps)
	}
	if rc.ActivationCheckpointing || rc.CPUOffload || rc.Compile {
		return errors.New("torchrun: activation_checkpointing, cpu_offload and compile are not implemented by the reference script yet; set them to false")
	}
	if _, err := shapes.Lookup(rc.Model); err != nil {
		return err
	}
	info, err := b.torch(ctx, o.Python)
	if err != nil {
		return err
	}
	cpu := !info.CUDA || rc.Hardware == "cpu"
	switch {
	case cpu && rc.Sharding != sweeps.DDP && rc.Sharding != sweeps.NoShard:
		return fmt.Errorf("torchrun: sharding %s: torch %s on CPU cannot run FSDP; use ddp/no_shard or a CUDA machine", rc.Sharding, info.Version)
	case rc.MixedPrecision != sweeps.FP32:
		return fmt.Errorf("torchrun: mixed_precision %s: the reference script trains in fp32 only; set mixed_precision: fp32", rc.MixedPrecision)
	}
	return nil
}

// rankFile is what the script writes to ranks/rank-<r>.json.
type rankFile struct {
	Rank                  int            `json:"rank"`
	WorldSize             int            `json:"world_size"`
	Device                string         `json:"device"`
	Tokens                int64          `json:"tokens"`
	MeasuredWallS         float64        `json:"measured_wall_s"`
	Steps                 []results.Step `json:"steps"`
	Torch                 string         `json:"torch"`
	PeakMemAllocatedBytes *int64         `json:"peak_mem_allocated_bytes"`
	PeakMemReservedBytes  *int64         `json:"peak_mem_reserved_bytes"`
	PeakRSSBytes          *int64         `json:"peak_rss_bytes"`
}

// Args is the torchrun command line for rc (argv, no shell): python, then
// torch.distributed.run's flags, then the script and its flags.
func Args(rc sweeps.RunConfig, o Options, script, modelJSON string) []string {
	accum := max(rc.GradAccum, 1)
	args := []string{o.Python, "-m", "torch.distributed.run", "--standalone",
		// torch 1.13 knows only the underscore spelling; torch 2 accepts both.
		"--nproc_per_node", strconv.Itoa(rc.WorldSize),
		// Python 3.11 breaks torch 1.13's default log capture; redirect and tee stderr.
		"--redirects", "2", "--tee", "2",
		script,
		"--model-json", modelJSON,
		"--seed", strconv.FormatInt(rc.Seed, 10),
		"--seq-len", strconv.Itoa(rc.SeqLen),
		"--batch-per-device", strconv.Itoa(rc.BatchPerDevice),
		"--grad-accum", strconv.Itoa(accum),
		"--steps", strconv.Itoa(rc.Steps),
		"--warmup-steps", strconv.Itoa(rc.WarmupSteps),
		"--sharding", rc.Sharding,
		"--mixed-precision", rc.MixedPrecision,
		"--lr", strconv.FormatFloat(o.LR, 'g', -1, 64),
		"--weight-decay", strconv.FormatFloat(o.WeightDecay, 'g', -1, 64),
	}
	return append(args, o.ExtraArgs...)
}

// Run launches torchrun in its own process group, streams step events from rank 0's
// FSDPBENCH lines, and reads every rank's report into the Result.
func (b *Backend) Run(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
	if emit == nil {
		emit = func(backends.Event) {}
	}
	res := results.Result{WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode,
		TokensPerStep: rc.TokensPerStep(), Started: time.Now()}
	o, err := ParseOptions(rc.BackendOptions)
	if err != nil {
		return res, err
	}
	shape, err := shapes.Lookup(rc.Model)
	if err != nil {
		return res, err
	}
	if env.RunDir == "" {
		return res, errors.New("torchrun: the run has no directory (RunEnv.RunDir is empty)")
	}
	ranksDir := filepath.Join(env.RunDir, "ranks")
	if err := os.MkdirAll(ranksDir, 0o755); err != nil {
		return res, fmt.Errorf("torchrun: creating %s: %w", ranksDir, err)
	}
	script := o.Script
	if script == "" {
		script = filepath.Join(env.RunDir, "fsdpbench_train.py")
		if err := os.WriteFile(script, trainScript, 0o644); err != nil {
			return res, fmt.Errorf("torchrun: writing the script: %w", err)
		}
	}
	modelJSON := filepath.Join(env.RunDir, "model.json")
	mj, err := json.Marshal(shape)
	if err != nil {
		return res, err
	}
	if err := os.WriteFile(modelJSON, mj, 0o644); err != nil {
		return res, fmt.Errorf("torchrun: writing %s: %w", modelJSON, err)
	}
	info, err := b.torch(ctx, o.Python)
	if err != nil {
		return res, err
	}
	res.Env.Torch = info.Version
	res.Env.ModelParams = shape.Params()

	argv := Args(rc, o, script, modelJSON)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "FSDPBENCH_METRICS_DIR="+ranksDir)
	if rc.Hardware == "cpu" {
		cmd.Env = append(cmd.Env, "FSDPBENCH_DEVICE=cpu")
	}
	if len(env.Devices) > 0 {
		ids := make([]string, len(env.Devices))
		for i, d := range env.Devices {
			ids[i] = strconv.Itoa(d)
		}
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+strings.Join(ids, ","))
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return res, err
	}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("torchrun: starting %s: %w", argv[0], err)
	}
	emit(backends.Event{Kind: backends.EventStarted, Time: time.Now()})

	var (
		wg                  sync.WaitGroup
		mu                  sync.Mutex
		lastErr, infeasible string
		oom                 bool
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		scan(stdout, env.Stdout, func(line string) {
			i := strings.Index(line, stepPrefix)
			if i < 0 {
				return
			}
			var st struct {
				results.Step
				Rank int `json:"rank"`
			}
			if json.Unmarshal([]byte(line[i+len(stepPrefix):]), &st) != nil {
				return
			}
			loss := st.Loss
			emit(backends.Event{Kind: backends.EventStep, Time: time.Now(), Rank: st.Rank, Step: st.Step.Step,
				Loss: loss, StepTimeS: st.StepTimeS, Tokens: rc.TokensPerStep()})
		})
	}()
	go func() {
		defer wg.Done()
		scan(stderr, env.Stderr, func(line string) {
			mu.Lock()
			defer mu.Unlock()
			if i := strings.Index(line, infeasibleMarker); i >= 0 && infeasible == "" {
				infeasible = line[i+len(infeasibleMarker):]
			}
			if strings.Contains(line, oomMarker) || strings.Contains(line, "CUDA out of memory") || strings.Contains(line, "OutOfMemoryError") {
				oom = true
			}
			if t := strings.TrimSpace(line); t != "" && (strings.Contains(t, "Error") || strings.Contains(t, "error") || strings.HasPrefix(t, "fsdpbench:")) {
				lastErr = t
			}
		})
	}()

	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(killGrace):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		case <-done:
		}
	}()
	wg.Wait()
	waitErr := cmd.Wait()
	close(done)
	// Whatever the ranks left behind (a rank that outlived torchrun) goes too.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	res.Finished = time.Now()

	mu.Lock()
	defer mu.Unlock()
	switch {
	case ctx.Err() != nil:
		res.Status = results.StatusCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			res.Status = results.StatusTimeout
		}
		res.Error = ctx.Err().Error()
	case infeasible != "":
		res.Status, res.Error = results.StatusInfeasible, infeasible
	case oom:
		res.Status, res.Error = results.StatusOOM, lastErr
	case waitErr != nil:
		res.Status = results.StatusFailed
		res.Error = fmt.Sprintf("torchrun exited with %v: %s (see stderr.log)", waitErr, lastErr)
	default:
		if err := collect(&res, rc, ranksDir, shape); err != nil {
			res.Status, res.Error = results.StatusFailed, err.Error()
		}
	}
	emit(backends.Event{Kind: backends.EventFinished, Time: time.Now(), Status: res.Status})
	return res, nil
}

// scan copies r to sink (when set) line by line and hands each line to f.
func scan(r io.Reader, sink io.Writer, f func(string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if sink != nil {
			_, _ = io.WriteString(sink, line+"\n")
		}
		f(line)
	}
	_, _ = io.Copy(io.Discard, r)
}

// collect reads every rank's report into res.
func collect(res *results.Result, rc sweeps.RunConfig, dir string, shape shapes.Shape) error {
	files := make([]rankFile, rc.WorldSize)
	for r := range files {
		path := filepath.Join(dir, "rank-"+strconv.Itoa(r)+".json")
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("torchrun: rank %d exited cleanly but its report is missing: %w", r, err)
		}
		if err := json.Unmarshal(data, &files[r]); err != nil {
			return fmt.Errorf("torchrun: rank %d's report %s: %w", r, path, err)
		}
		if len(files[r].Steps) != rc.Steps {
			return fmt.Errorf("torchrun: rank %d reported %d measured steps, want %d", r, len(files[r].Steps), rc.Steps)
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
	maxPtr := func(cur, v *int64) *int64 {
		if v == nil || (cur != nil && *cur >= *v) {
			return cur
		}
		return results.I64(*v)
	}
	for _, f := range files {
		res.MeasuredWallS = max(res.MeasuredWallS, f.MeasuredWallS)
		res.PeakMemAllocatedBytes = maxPtr(res.PeakMemAllocatedBytes, f.PeakMemAllocatedBytes)
		res.PeakMemReservedBytes = maxPtr(res.PeakMemReservedBytes, f.PeakMemReservedBytes)
		res.PeakRSSBytes = maxPtr(res.PeakRSSBytes, f.PeakRSSBytes)
		loss := f.Steps[len(f.Steps)-1].Loss
		res.PerRank = append(res.PerRank, results.RankResult{Rank: f.Rank, MeasuredWallS: f.MeasuredWallS,
			Tokens: f.Tokens, PeakMemAllocatedBytes: f.PeakMemAllocatedBytes, PeakMemReservedBytes: f.PeakMemReservedBytes,
			PeakRSSBytes: f.PeakRSSBytes, LossLast: loss})
	}
	res.ModelFlopsPerToken = shape.FlopsPerToken(rc.SeqLen)
	if files[0].Device == "cpu" {
		prof, err := hardware.Lookup("cpu")
		if err != nil {
			return err
		}
		if res.PeakFlopsPerS, err = prof.Peak(sweeps.FP32); err != nil {
			return err
		}
		res.Env.Hardware = "cpu"
	}
	res.Status = results.StatusOK
	return nil
}
