package torchrun

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
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

// Markers the script (and torch) print on stderr; torchrun exits 1 whatever its
// children's codes were, so the outcome is read from the text.
const (
	infeasibleMarker = "fsdpbench: infeasible: "
	oomMarker        = "fsdpbench: out of memory"
)

//go:embed python/fsdpbench_train.py
var trainScript []byte

// torchInfo is what the configured python's torch says about itself.
type torchInfo struct {
	Version      string `json:"version"`
	CUDA         bool   `json:"cuda"`
	FSDP2        bool   `json:"fsdp2"` // torch.distributed.fsdp.fully_shard (torch >= 2.6)
	Transformers bool   `json:"transformers"`
	Accelerate   bool   `json:"accelerate"`
}

// probeScript prints torchInfo. Importing FSDP can fail on old torch (1.13 on
// Python 3.11 raises at import), which only means "no FSDP2".
const probeScript = `import json, importlib.util, torch, numpy
def has(m):
    try:
        return importlib.util.find_spec(m) is not None
    except Exception:
        return False
try:
    from torch.distributed.fsdp import fully_shard
    fsdp2 = True
except Exception:
    fsdp2 = False
print(json.dumps({"version": torch.__version__, "cuda": torch.cuda.is_available(), "fsdp2": fsdp2,
                  "transformers": has("transformers"), "accelerate": has("accelerate")}))
`

// Backend launches the project's PyTorch script under torchrun.
type Backend struct {
	mu     sync.Mutex
	probes map[string]probe
	// localNode picks a one-node run's rendezvous (LocalNode; tests replace it
	// to hand out a port that is taken).
	localNode func(id string) (*Node, error)
}

type probe struct {
	info torchInfo
	err  error
}

// New returns the torchrun backend.
func New() *Backend { return &Backend{probes: map[string]probe{}, localNode: LocalNode} }

// rendezvousAttempts is how many times a one-node run is started when its
// rendezvous port turns out to be taken (rendezvousPortTaken) before any rank ran.
const rendezvousAttempts = 3

// rendezvousPortTaken reports whether a line of torchrun's stderr says that its
// agent could not bind the rendezvous store's port (torch 1.13 and 2.x word it
// the same: "The server socket has failed to bind to [::]:P (errno: 98 -
// Address already in use)").
func rendezvousPortTaken(line string) bool {
	return strings.Contains(line, "server socket has failed to") && strings.Contains(line, "Address already in use")
}

// Name returns "torchrun".
func (*Backend) Name() string { return Name }

// probeWaitDelay is how long the torch probe's output may stay open after python
// exited.
const probeWaitDelay = 2 * time.Second

// torch asks python which torch it has (once per interpreter).
func (b *Backend) torch(ctx context.Context, python string) (torchInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.probes[python]; ok {
		return p.info, p.err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", probeScript)
	// Output waits for EOF on python's stdout: something the interpreter started
	// (a sitecustomize, a plugin of a library) that keeps it open must not hold the
	// probe once python has exited.
	cmd.WaitDelay = probeWaitDelay
	out, err := cmd.Output()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // python exited 0; its output was read up to then
	}
	var p probe
	if err != nil {
		var ee *exec.ExitError
		msg := ""
		if errors.As(err, &ee) {
			msg = strings.TrimSpace(string(ee.Stderr))
			if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
				msg = msg[i+1:]
			}
		}
		p.err = fmt.Errorf("torchrun: %s cannot import torch and numpy (%v: %s); install them with `apt install python3-torch python3-numpy` or set backend_options.python",
			python, err, msg)
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
		Summary: "PyTorch under torchrun, accelerate launch, plain python or your own command: the project's reference trainer (DDP; FSDP on CUDA) or your own script",
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

// Validate refuses what cannot run: bad options or templates, several nodes without
// a launcher that starts them, and, for the project's script, what the installed
// torch cannot do here.
func (b *Backend) Validate(ctx context.Context, rc sweeps.RunConfig) error {
	o, err := ParseOptions(rc.BackendOptions)
	if err != nil {
		return err
	}
	if rc.WorldSize <= 0 || rc.Nodes <= 0 || rc.Nodes*rc.GPUsPerNode != rc.WorldSize {
		return fmt.Errorf("torchrun: world_size %d must be nodes %d x gpus_per_node %d", rc.WorldSize, rc.Nodes, rc.GPUsPerNode)
	}
	if err := rc.CheckCheckpoint(); err != nil {
		return backends.SpecErrorf("torchrun: %w", err)
	}
	if o.Launcher == LauncherPython && rc.WorldSize != 1 {
		return backends.SpecErrorf("torchrun: backend_options.launcher python starts one process with no distributed environment, and world_size is %d; use world_size 1, or launcher torchrun (or command) for several ranks", rc.WorldSize)
	}
	// A command starts its ranks itself: srun inside an allocation spreads them
	// over its nodes.
	if rc.Nodes > 1 && rc.Launcher != "slurm" && o.Launcher != LauncherCommand {
		return fmt.Errorf("torchrun: %d nodes: the local launcher starts one node; use launcher: slurm (torchrun on every node, c10d rendezvous on the first) or nodes: 1", rc.Nodes)
	}
	if rc.SeqLen <= 0 || rc.BatchPerDevice <= 0 || rc.Steps <= 0 || rc.WarmupSteps < 0 {
		return fmt.Errorf("torchrun: seq_len %d, batch_per_device %d and steps %d must be positive, warmup_steps %d not negative",
			rc.SeqLen, rc.BatchPerDevice, rc.Steps, rc.WarmupSteps)
	}
	// Templates and the script are the spec's: a mistake in them is a spec error.
	vars := runVars(rc, validatePaths("run"), validateScript(o, "run"))
	if o.Args != nil {
		if _, err := contract.Expand("torchrun: backend_options.args", o.Args, vars); err != nil {
			return backends.SpecErr(err)
		}
	}
	if o.Launcher == LauncherCommand {
		argv, err := CommandArgv(o, vars, nil, "script.py", nil)
		if err != nil {
			return backends.SpecErr(err)
		}
		// Checked only where the runs start on this machine: a Slurm node has a
		// PATH of its own.
		if rc.Launcher != "slurm" {
			if err := checkProgram(append(argv, "")[0]); err != nil {
				return err
			}
		}
	}
	if o.MetricsFile != "" {
		if _, err := contract.Expand("torchrun: backend_options.metrics_file", []string{o.MetricsFile}, vars); err != nil {
			return backends.SpecErr(err)
		}
	}
	if err := validateWorkingDir(rc, o); err != nil {
		return err
	}
	if o.Script != "" {
		if info, err := os.Stat(o.Script); err != nil {
			return backends.SpecErrorf("torchrun: backend_options.script: %w (a path relative to the directory fsdpbench runs in)", err)
		} else if !info.Mode().IsRegular() {
			return backends.SpecErrorf("torchrun: backend_options.script: %s is not a regular file", o.Script)
		}
	}
	if o.Launcher == LauncherAccelerate {
		if _, err := AccelerateConfig(rc, o); err != nil {
			return err
		}
	}
	info, err := b.torch(ctx, o.Python)
	if err != nil && !o.UsesProjectScript() && o.Launcher == LauncherCommand {
		return nil // the command brings its own interpreter; torch's version stays unknown
	}
	if err != nil {
		if _, chosen := rc.BackendOptions["python"]; chosen && ctx.Err() == nil {
			// The spec's interpreter, which every run would find wanting alike.
			return backends.SpecErrorf("torchrun: backend_options.python: %w", err)
		}
		return err
	}
	if o.Launcher == LauncherAccelerate && !info.Accelerate {
		return backends.SpecErrorf("torchrun: backend_options.launcher accelerate: %s has no accelerate package; install it there or use launcher: torchrun", o.Python)
	}
	if o.UsesProjectScript() {
		return b.validateOwnScript(rc, o, info)
	}
	return nil
}

// runVars are the template variables of a run: the metrics contract's
// (contract.Vars) and the backend's own: {grad_accum_global}, the accumulation
// count of all ranks together (nanoGPT's gradient_accumulation_steps, which its
// train.py divides by the world size); {last_iter}, the number of the last
// iteration counted from 0 (nanoGPT runs iter 0 … iter max_iters, so
// --max_iters={last_iter} runs warmup_steps + steps iterations); {script_dir},
// the directory of the script (for working_dir).
func runVars(rc sweeps.RunConfig, p contract.Paths, script string) map[string]string {
	v := contract.Vars(rc, p)
	v["grad_accum_global"] = strconv.Itoa(max(rc.GradAccum, 1) * rc.WorldSize)
	v["last_iter"] = strconv.Itoa(rc.WarmupSteps + rc.Steps - 1)
	v["script_dir"] = filepath.Dir(script)
	return v
}

// checkProgram says, as a spec error, why the program of launcher: command
// cannot be started: a name that is not on PATH, or a path that names no
// executable file.
func checkProgram(prog string) error {
	if prog == "" {
		return backends.SpecErrorf("%s: the program (its first element) expands to nothing", commandWhere)
	}
	if _, err := exec.LookPath(commandProgram(prog)); err != nil {
		hint := "install it, or give its path"
		if strings.Contains(prog, "/") {
			hint = "a path relative to the directory fsdpbench runs in, or absolute"
		}
		return backends.SpecErrorf("%s: cannot run %q: %v (%s)", commandWhere, prog, err, hint)
	}
	return nil
}

// commandProgram is where launcher: command's program is: a name is looked up on
// PATH when the run starts, a relative path is relative to the directory
// fsdpbench runs in (as backend_options.script is), not to the run's working
// directory, made absolute here.
func commandProgram(prog string) string {
	if !strings.Contains(prog, "/") || filepath.IsAbs(prog) {
		return prog
	}
	if abs, err := filepath.Abs(prog); err == nil {
		return abs
	}
	return prog
}

// validatePaths are stand-in paths of a run under root, for checking templates
// before the run has a directory.
func validatePaths(root string) contract.Paths {
	return contract.Paths{RunDir: root, MetricsDir: filepath.Join(root, "ranks"), OutputDir: filepath.Join(root, "output"),
		ModelJSON: filepath.Join(root, "model.json")}
}

// validateScript is the script's path as the run will see it, with root standing
// for the run directory the project's script is written to.
func validateScript(o Options, root string) string {
	if o.Script != "" {
		if abs, err := filepath.Abs(o.Script); err == nil {
			return abs
		}
		return o.Script
	}
	return filepath.Join(root, "fsdpbench_train.py")
}

// validateWorkingDir refuses a working_dir template that does not expand, and one
// that names no directory when it does not depend on the run's own directories
// (one that does cannot exist before the run).
func validateWorkingDir(rc sweeps.RunConfig, o Options) error {
	if o.WorkingDir == "" {
		return nil
	}
	dir := func(root string) (string, error) {
		return expandWorkingDir(o, runVars(rc, validatePaths(root), validateScript(o, root)))
	}
	a, err := dir("/run-a")
	if err != nil {
		return backends.SpecErr(err)
	}
	if b, err := dir("/run-b"); err != nil || a != b {
		return nil // under the run's directory: checked when the run starts
	}
	return checkDir(a)
}

// expandWorkingDir is working_dir expanded with vars, made absolute against the
// directory fsdpbench runs in.
func expandWorkingDir(o Options, vars map[string]string) (string, error) {
	const where = "torchrun: backend_options.working_dir"
	d, err := contract.Expand(where, []string{o.WorkingDir}, vars)
	if err != nil {
		return "", err
	}
	if len(d) != 1 || d[0] == "" {
		return "", backends.SpecErrorf("%s: %q expands to nothing for this run; give a directory", where, o.WorkingDir)
	}
	abs, err := filepath.Abs(d[0])
	if err != nil {
		return "", fmt.Errorf("%s: %w", where, err)
	}
	return abs, nil
}

// checkDir says, as a spec error, why dir cannot be a working directory.
func checkDir(dir string) error {
	info, err := os.Stat(dir)
	switch {
	case err != nil:
		return backends.SpecErrorf("torchrun: backend_options.working_dir: %w (a path relative to the directory fsdpbench runs in, or \"{script_dir}\", the script's own)", err)
	case !info.IsDir():
		return backends.SpecErrorf("torchrun: backend_options.working_dir: %s is not a directory", dir)
	}
	return nil
}

// validateOwnScript refuses what the project's script cannot run with this torch.
func (b *Backend) validateOwnScript(rc sweeps.RunConfig, o Options, info torchInfo) error {
	if o.ModelImpl == ModelTransformers {
		if !info.Transformers {
			return backends.SpecErrorf("torchrun: backend_options.model_impl transformers: %s has no transformers package; install it there or use the built-in model", o.Python)
		}
	} else {
		shape, err := shapes.Lookup(rc.Model)
		if err != nil {
			return err
		}
		if shape.Arch != shapes.ArchLlama || shape.TiedEmbeddings || shape.QKVBias || shape.OutBias || shape.MLPBias {
			return fmt.Errorf("torchrun: model %s: the built-in model is the Go trainer's (llama, no biases, untied embeddings); set backend_options.model_impl: transformers with a config.json for other models", rc.Model)
		}
	}
	cpu := !info.CUDA || rc.Hardware == "cpu"
	sharded := rc.Sharding != sweeps.DDP && rc.Sharding != sweeps.NoShard
	v2 := !strings.HasPrefix(info.Version, "1.")
	switch {
	case cpu && sharded:
		return fmt.Errorf("torchrun: sharding %s: torch %s on CPU cannot run FSDP; use ddp/no_shard or a CUDA machine", rc.Sharding, info.Version)
	case cpu && rc.MixedPrecision != sweeps.FP32:
		return fmt.Errorf("torchrun: mixed_precision %s on CPU: the script benchmarks fp32 on CPU; set mixed_precision: fp32", rc.MixedPrecision)
	case rc.CPUOffload && !sharded:
		return fmt.Errorf("torchrun: cpu_offload with %s: offload needs a sharded strategy (DDP keeps every state on the device)", rc.Sharding)
	case rc.Compile && !v2:
		return fmt.Errorf("torchrun: compile: torch %s has no torch.compile; set compile: false", info.Version)
	case o.FSDPAPI == 2 && sharded && !info.FSDP2:
		return fmt.Errorf("torchrun: fsdp_api 2: torch %s has no FSDP2 (fully_shard); set backend_options.fsdp_api: 1", info.Version)
	}
	fsdp2 := sharded && info.FSDP2 && o.FSDPAPI != 1
	if fsdp2 {
		switch {
		case rc.BackwardPrefetch == sweeps.BackwardPost:
			return errors.New("torchrun: backward_prefetch backward_post: FSDP2 has none; use backward_pre/none or backend_options.fsdp_api: 1")
		case rc.WrapPolicy != "" && rc.WrapPolicy != "transformer":
			return fmt.Errorf("torchrun: wrap_policy %s: FSDP2 shards per module (transformer); use backend_options.fsdp_api: 1 for size-based wrapping", rc.WrapPolicy)
		}
	}
	return nil
}

// Run launches the run's ranks (torchrun or accelerate launch) in their own process
// group, streams step events from rank 0's FSDPBENCH lines, and reads what the
// script reported into the Result (collect.go).
func (b *Backend) Run(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
	if emit == nil {
		emit = func(backends.Event) {}
	}
	res := results.Result{WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode,
		TokensPerStep: rc.TokensPerStep(), Started: time.Now()}
	if env.RunDir == "" {
		return res, errors.New("torchrun: the run has no directory (RunEnv.RunDir is empty)")
	}
	runDir, err := filepath.Abs(env.RunDir)
	if err != nil {
		return res, err
	}
	job, err := b.Prepare(ctx, rc, runDir)
	if err != nil {
		return res, err
	}
	res.Env.Torch = job.torch

	// Python's tempfile, and with it torch, accelerate and the user's libraries,
	// writes under $TMPDIR: that is the run's own, so nothing of a run lands outside
	// its directory; it is scratch, removed when the run ends.
	tmp := filepath.Join(runDir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return res, fmt.Errorf("torchrun: %w", err)
	}
	defer os.RemoveAll(tmp)
	var (
		rep     *Report
		waitErr error
		once    sync.Once
	)
	for attempt := 1; ; attempt++ {
		node, err := b.localNode(rc.ID)
		if err != nil {
			return res, err
		}
		argv, err := job.Argv(node)
		if err != nil {
			return res, err
		}
		if err := writeCommand(filepath.Join(runDir, "command.json"), argv); err != nil {
			return res, err
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = job.Dir
		cmd.Env = append(contract.WithEnv(job.baseEnviron(os.Environ()), rc.Env), append(job.Env(env.Devices), "TMPDIR="+tmp)...)
		rep = job.NewReport()
		var portTaken, stepped bool
		var started bool
		started, waitErr = contract.RunGroup(ctx, cmd, killGrace, contract.Lines{
			Stdout: func(line string) {
				for _, st := range rep.Stdout(line) {
					stepped = true
					emit(stepEvent(st, rc))
				}
			},
			Stderr: func(line string) {
				portTaken = portTaken || rendezvousPortTaken(line)
				rep.Stderr(line)
			},
			StdoutSink: env.Stdout,
			StderrSink: env.Stderr,
			Started:    func() { once.Do(func() { emit(backends.Event{Kind: backends.EventStarted, Time: time.Now()}) }) },
		})
		if !started {
			return res, fmt.Errorf("torchrun: starting %s: %w", argv[0], waitErr)
		}
		// Another process bound the rendezvous port between LocalNode's check and
		// torchrun's bind (a parallel sweep, or any program choosing ports itself):
		// the agent failed at once, before any rank started, so the run is
		// started again on another port rather than failed for nothing it did.
		if !portTaken || stepped || waitErr == nil || ctx.Err() != nil || node.Nodes > 1 || attempt == rendezvousAttempts {
			break
		}
		if env.Stderr != nil {
			_, _ = fmt.Fprintf(env.Stderr, "fsdpbench: torchrun's rendezvous port %s was taken by another process; starting the run again on another port (attempt %d of %d)\n",
				node.Endpoint, attempt+1, rendezvousAttempts)
		}
		if job, err = b.Prepare(ctx, rc, runDir); err != nil {
			return res, err
		}
	}
	res.Finished = time.Now()

	if ctx.Err() != nil {
		res.Status = results.StatusCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			res.Status = results.StatusTimeout
		}
		res.Error = ctx.Err().Error()
	} else {
		job.Finish(&res, rep, waitErr, func(s string) {
			if env.Stderr != nil {
				_, _ = io.WriteString(env.Stderr, s+"\n")
			}
		})
	}
	emit(backends.Event{Kind: backends.EventFinished, Time: time.Now(), Status: res.Status})
	return res, nil
}

// Job is one repeat of a run made ready to start: its files are in place and its
// command line can be built for any node. Run starts it here; a launcher that
// starts the processes elsewhere (a Slurm job script) uses Argv, Env and
// Dir (the working directory), feeds the logs to a Report, and calls
// Finish.
type Job struct {
	// Paths are the run's files and directories.
	Paths contract.Paths
	// Dir is the directory the processes run in: backend_options.working_dir, or
	// Paths.OutputDir.
	Dir        string
	rc         sweeps.RunConfig
	o          Options
	vars       map[string]string
	script     string
	scriptArgs []string
	accelCfg   string // the generated accelerate config, for launcher: accelerate
	torch      string
}

// Prepare readies one repeat of rc in runDir (an absolute path): it clears the
// previous repeat's reports, writes the script (unless it is the user's), the
// model's shape and the accelerate config, and expands the argument template.
func (b *Backend) Prepare(ctx context.Context, rc sweeps.RunConfig, runDir string) (*Job, error) {
	o, err := ParseOptions(rc.BackendOptions)
	if err != nil {
		return nil, err
	}
	j := &Job{rc: rc, o: o, Paths: contract.Paths{RunDir: runDir, MetricsDir: filepath.Join(runDir, "ranks"),
		OutputDir: filepath.Join(runDir, "output"), ModelJSON: filepath.Join(runDir, "model.json")}}
	p := j.Paths
	// A repeat starts clean: a previous repeat's files must not pass for this one's.
	if err := os.Remove(filepath.Join(runDir, TimelineFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("torchrun: clearing %s: %w", TimelineFile, err)
	}
	for _, d := range []string{p.MetricsDir, p.OutputDir, j.profileDir()} {
		if err := os.RemoveAll(d); err != nil {
			return nil, fmt.Errorf("torchrun: clearing %s: %w", d, err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("torchrun: creating %s: %w", d, err)
		}
	}
	if j.script, err = b.script(o, runDir); err != nil {
		return nil, err
	}
	if shape, err := shapes.Lookup(rc.Model); err == nil {
		mj, err := json.Marshal(shape)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(p.ModelJSON, mj, 0o644); err != nil {
			return nil, fmt.Errorf("torchrun: writing %s: %w", p.ModelJSON, err)
		}
	}
	info, err := b.torch(ctx, o.Python)
	if err != nil && (o.UsesProjectScript() || o.Launcher != LauncherCommand) {
		return nil, err
	}
	j.torch = info.Version
	j.vars = runVars(rc, p, j.script)
	if j.Dir, err = workDir(o, j.vars, p); err != nil {
		return nil, err
	}
	j.scriptArgs = ScriptArgs(rc, o, p)
	if o.Args != nil {
		if j.scriptArgs, err = contract.Expand("torchrun: backend_options.args", o.Args, j.vars); err != nil {
			return nil, err
		}
	}
	j.scriptArgs = append(j.scriptArgs, o.ExtraArgs...)
	if o.Launcher == LauncherAccelerate {
		cfg, err := AccelerateConfig(rc, o)
		if err != nil {
			return nil, err
		}
		j.accelCfg = filepath.Join(runDir, "accelerate_config.yaml")
		if err := os.WriteFile(j.accelCfg, cfg, 0o644); err != nil {
			return nil, fmt.Errorf("torchrun: writing %s: %w", j.accelCfg, err)
		}
	}
	return j, nil
}

// workDir is the directory a run's processes start in: working_dir, or the run's
// output directory.
func workDir(o Options, vars map[string]string, p contract.Paths) (string, error) {
	if o.WorkingDir == "" {
		return p.OutputDir, nil
	}
	dir, err := expandWorkingDir(o, vars)
	if err != nil {
		return "", err
	}
	return dir, checkDir(dir)
}

// Argv is the command line that starts the run's ranks on node (see
// TorchrunArgv; nil is --standalone), or its one process (launcher python), or
// the user's command (launcher command; the error is its template's).
func (j *Job) Argv(node *Node) ([]string, error) {
	switch j.o.Launcher {
	case LauncherAccelerate:
		return AccelerateArgv(j.o, node, j.accelCfg, j.script, j.scriptArgs), nil
	case LauncherPython:
		return PythonArgv(j.o, j.script, j.scriptArgs), nil
	case LauncherCommand:
		argv, err := CommandArgv(j.o, j.vars, node, j.script, j.scriptArgs)
		if err == nil && len(argv) > 0 {
			argv[0] = commandProgram(argv[0])
		}
		return argv, err
	}
	return TorchrunArgv(j.rc, j.o, node, j.logDir(), j.script, j.scriptArgs), nil
}

// distEnv are the variables that make a script take its distributed path
// (nanoGPT's train.py looks at RANK): a python launcher's one process must not
// inherit them from an fsdpbench that itself runs under torchrun or Slurm.
var distEnv = []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
	"ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"}

// baseEnviron is the environment the job's processes start from here: environ,
// less the distributed variables under launcher python.
func (j *Job) baseEnviron(environ []string) []string {
	if j.o.Launcher != LauncherPython {
		return environ
	}
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(distEnv, name) {
			out = append(out, kv)
		}
	}
	return out
}

// profileDir is where the ranks write their torch.profiler traces
// ($FSDPBENCH_PROFILE_DIR), in the run directory.
func (j *Job) profileDir() string { return filepath.Join(j.Paths.RunDir, ProfileDir) }

// logDir is where torchrun keeps its per-rank logs, in the run directory.
func (j *Job) logDir() string { return filepath.Join(j.Paths.RunDir, "torchelastic") }

// Env is what the job adds to its processes' environment: the metrics contract's
// paths, and the devices assigned to the run on this host, if any.
func (j *Job) Env(devices []int) []string {
	env := []string{contract.EnvMetricsDir + "=" + j.Paths.MetricsDir, contract.EnvRunDir + "=" + j.Paths.RunDir,
		contract.EnvOutputDir + "=" + j.Paths.OutputDir, contract.EnvRunID + "=" + j.rc.ID}
	if !j.o.NoProfile {
		env = append(env, EnvProfileDir+"="+j.profileDir())
	}
	if j.rc.Hardware == "cpu" {
		env = append(env, "FSDPBENCH_DEVICE=cpu")
	}
	if len(j.rc.Env) > 0 {
		// The names of the spec's variables, for the project's script to record
		// what each rank received (its rank file's spec_env). The values travel
		// in the environment itself (contract.WithEnv; the Slurm job's exports).
		env = append(env, contract.EnvSpecEnv+"="+strings.Join(slices.Sorted(maps.Keys(j.rc.Env)), ","))
	}
	if j.o.Launcher == LauncherPython || j.o.Launcher == LauncherCommand {
		// Step lines arrive as they are printed, not when a pipe's buffer fills
		// (torchrun and accelerate pass their children's lines on as they come).
		env = append(env, "PYTHONUNBUFFERED=1")
	}
	if len(devices) > 0 {
		env = append(env, "CUDA_VISIBLE_DEVICES="+contract.VisibleDevices(devices, os.Getenv("CUDA_VISIBLE_DEVICES")))
	}
	return env
}

// NewReport returns the Report to feed the job's output lines to.
func (j *Job) NewReport() *Report {
	return &Report{logs: j.o.Logs, stepLines: contract.NewStepLines(j.rc.WorldSize)}
}

// Finish sets res's status from how the job ended (exitErr is the launcher's exit,
// nil for success) and what its output said, and, when it succeeded, reads its
// reports into res. A cancelled or timed-out job is the caller's to classify.
// warn receives notes for the run's stderr.log.
func (j *Job) Finish(res *results.Result, rep *Report, exitErr error, warn func(string)) {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if res.Env.Torch == "" {
		res.Env.Torch = j.torch
	}
	switch {
	case rep.infeasible != "":
		res.Status, res.Error = results.StatusInfeasible, rep.infeasible
	case rep.oom:
		res.Status, res.Error = results.StatusOOM, rep.oomLine
	case exitErr != nil:
		res.Status = results.StatusFailed
		res.Error = fmt.Sprintf("%s exited with %v: %s (see stderr.log)%s", j.program(), exitErr, rep.reason(), j.configuratorHint(rep))
	default:
		if j.o.Logs != nil && rep.logs == nil {
			res.Status, res.Error = results.StatusFailed, "torchrun: internal error: the job's output was not kept for backend_options.logs; feed it to Job.NewReport()"
			return
		}
		if rep.badStep != "" {
			res.Status, res.Error = results.StatusFailed, "torchrun: the script printed a broken FSDPBENCH line: "+rep.badStep
			return
		}
		c := collector{rc: j.rc, o: j.o, paths: j.Paths, vars: j.vars, stepLines: rep.steps, lines: &rep.lines, warn: warn}
		if err := c.collect(res); err != nil {
			res.Status, res.Error = results.StatusFailed, err.Error()
			return
		}
		// The step breakdown is the traces' when the ranks wrote some; a trace
		// that cannot be read leaves the figures absent and says why, but the
		// run's throughput stands.
		if err := profileFigures(res, j.profileDir(), j.Paths.RunDir, j.rc.WorldSize); err != nil {
			warn("fsdpbench: no step breakdown: " + err.Error())
			if res.Extra == nil {
				res.Extra = map[string]any{}
			}
			res.Extra["step_breakdown_error"] = err.Error()
		}
		if res.Status == results.StatusOK && rep.diverged != "" {
			res.Status, res.Error = results.StatusDiverged, "diverged: "+rep.diverged
		}
		j.checkScriptTokens(&c, res, rep.scriptTokens)
	}
}

// checkScriptTokens compares the tokens per iteration the script printed, if it
// did (nanoGPT: "tokens per iteration will be: N"), with the run's global batch
// in tokens, and records a mismatch as a warning: the figures then count tokens
// the script did not train on (nanoGPT's gradient_accumulation_steps is the
// count of all ranks together).
func (j *Job) checkScriptTokens(c *collector, res *results.Result, printed int64) {
	if printed == 0 {
		return
	}
	if res.Extra == nil {
		res.Extra = map[string]any{}
	}
	res.Extra["script_tokens_per_step"] = printed
	rc := j.rc
	if want := rc.TokensPerStep(); printed != want {
		c.warning(res, fmt.Sprintf("the script printed \"tokens per iteration will be: %d\" but the run's step is %d tokens "+
			"(batch_per_device %d × grad_accum %d × world_size %d × seq_len %d), which its figures count; "+
			"map the axes onto the script's flags so they agree: nanoGPT's gradient_accumulation_steps counts all ranks "+
			"(--gradient_accumulation_steps={grad_accum_global}), its batch_size is per rank (--batch_size={batch_per_device}) "+
			"and its block_size is seq_len (--block_size={seq_len})",
			printed, want, rc.BatchPerDevice, max(rc.GradAccum, 1), rc.WorldSize, rc.SeqLen))
	}
}

// configuratorHint says how to write the arguments when the script failed in
// nanoGPT's configurator.py (it takes only --key=value and asserts otherwise)
// and the arguments have a flag and its value as two elements; the caller
// holds rep.mu.
func (j *Job) configuratorHint(rep *Report) string {
	inConfigurator := false
	for _, l := range append(slices.Clone(rep.firstErrAt), rep.tail...) {
		inConfigurator = inConfigurator || strings.Contains(l, "configurator")
	}
	if !inConfigurator {
		return ""
	}
	args, where := j.o.Args, "backend_options.args"
	if args == nil {
		args, where = j.scriptArgs, "the script's arguments"
	}
	for i, a := range args {
		if strings.HasPrefix(a, "--") && !strings.Contains(a, "=") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			return fmt.Sprintf("; nanoGPT's configurator.py takes --key=value arguments only: %s has %q, %q as two arguments; write %q",
				where, a, args[i+1], a+"="+args[i+1])
		}
	}
	return ""
}

// script is the path of the script to run: the user's (made absolute, since the
// script runs in the output directory) or the embedded one, written to the run.
func (b *Backend) script(o Options, runDir string) (string, error) {
	if o.Script != "" {
		abs, err := filepath.Abs(o.Script)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("torchrun: backend_options.script: %w", err)
		}
		return abs, nil
	}
	path := filepath.Join(runDir, "fsdpbench_train.py")
	if err := os.WriteFile(path, trainScript, 0o644); err != nil {
		return "", fmt.Errorf("torchrun: writing the script: %w", err)
	}
	return path, nil
}

// writeCommand records the exact argv in the run directory, so the run can be
// reproduced by hand.
func writeCommand(path string, argv []string) error {
	data, err := json.MarshalIndent(argv, "", "  ")
	if err != nil {
		return err
	}
	return results.WriteFileAtomic(path, append(data, '\n'))
}

// Report is what a job's output said: rank 0's step lines on stdout, and on
// stderr how it ended (torchrun exits 1 whatever its children's codes were, so the
// status is read from the text). Feed it every line; it is safe for concurrent use.
type Report struct {
	mu                  sync.Mutex
	logs                *LogOptions // what to keep for extraction; nil keeps nothing
	lines               logLines
	steps               []results.Step
	infeasible, oomLine string
	oom                 bool
	// firstErr is the first error line that is not a consequence of another rank's
	// failure, firstSecondary the first that is, lastErr the last of either.
	firstErr, firstSecondary, lastErr string
	// firstErrAt is where the exception of firstErr was raised: the traceback
	// lines above it in the same rank's stream (frameLines).
	firstErrAt []string
	// badStep is why the first broken FSDPBENCH line is broken; diverged says
	// where the first step line's loss was NaN or infinite.
	badStep, diverged string
	// recent holds each stream's (each rank prefix's) last few stderr lines, for
	// the traceback frame above an exception; tail the last lines of all, to
	// quote when no line says what went wrong.
	recent map[string][]string
	tail   []string
	// rankTail is the last lines a rank wrote (the launcher's tee prefixes
	// them), kept with their prefix; agentFailed is set once torchrun reported
	// a failed rank (ChildFailedError), after which its lines are its own.
	rankTail    []string
	agentFailed bool
	// scriptTokens is the tokens per iteration the script printed ("tokens per
	// iteration will be: N", nanoGPT), or 0.
	scriptTokens int64
	// stepLines checks each step record against the run's world and the
	// records before it (a repeated step, a rank the run does not have);
	// NewReport gives it the world size, a zero Report checks only repeats.
	stepLines *contract.StepLines
}

// Bounds of what a Report keeps of stderr.
const (
	recentLines   = 3    // per stream: a traceback's last frame is two lines
	recentStreams = 1024 // rank prefixes remembered
	tailLines     = 5
)

// tokensPerIter matches nanoGPT's "tokens per iteration will be: 491,520".
var tokensPerIter = regexp.MustCompile(`tokens per iteration will be: ([0-9][0-9,]*)\s*$`)

// Stdout takes one stdout line and returns the steps it reports: its valid
// FSDPBENCH records (two ranks printing at once can share a line, see
// contract.ParseStepLines); a broken one fails the run (Finish) with its position,
// as does a step its rank already reported or a rank outside the run's world
// (contract.StepLines).
func (o *Report) Stdout(line string) []contract.StepLine {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stepLines == nil {
		o.stepLines = contract.NewStepLines(0)
	}
	sts, errs := o.stepLines.Parse(line)
	if len(errs) > 0 && o.badStep == "" {
		o.badStep = errs[0].Error()
	}
	for _, st := range sts {
		o.steps = append(o.steps, st.Step)
		if st.Diverged != "" && o.diverged == "" {
			o.diverged = st.Diverged
		}
	}
	if o.logs != nil {
		o.lines.add(o.logs, line, false)
	}
	if m := tokensPerIter.FindStringSubmatch(line); m != nil && o.scriptTokens == 0 {
		if n, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64); err == nil && n > 0 && n <= backends.MaxTokens {
			o.scriptTokens = n
		}
	}
	return sts
}

// stepEvent is the progress event of a step line.
func stepEvent(st contract.StepLine, rc sweeps.RunConfig) backends.Event {
	return backends.Event{Kind: backends.EventStep, Time: time.Now(), Rank: st.Rank, Step: st.Step.Step,
		Loss: st.Loss, StepTimeS: st.StepTimeS, Tokens: rc.TokensPerStep()}
}

// Stderr takes one stderr line.
func (o *Report) Stderr(line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.logs != nil {
		o.lines.add(o.logs, line, true)
	}
	t := strings.TrimSpace(line)
	if t == "" {
		return
	}
	if i := strings.Index(t, infeasibleMarker); i >= 0 && o.infeasible == "" {
		o.infeasible = t[i+len(infeasibleMarker):]
	}
	if strings.Contains(t, oomMarker) || strings.Contains(t, "CUDA out of memory") || strings.Contains(t, "OutOfMemoryError") {
		if !o.oom {
			o.oomLine = stripRankPrefix(t)
		}
		o.oom = true
	}
	// The first exception a rank raised says why; torchrun's own summary
	// (ChildFailedError) comes last and only says that a child failed. The ranks
	// write through separate pipes, so a survivor's "connection closed by peer" can
	// be read before the exception of the rank that died: the root cause is the
	// first error that is not such a consequence, whatever the order of the lines.
	e := stripRankPrefix(t)
	stream := strings.TrimSpace(t[:len(t)-len(e)]) // the rank prefix, whatever the indentation after it
	// torchrun's ChildFailedError only says that a rank failed: it is no
	// reason, and the unprefixed lines after it are its summary, no rank's.
	childFailed := strings.Contains(t, "ChildFailedError")
	agentLine := childFailed || (o.agentFailed && stream == "")
	o.agentFailed = o.agentFailed || childFailed
	if isErrorLine(t) && !agentLine {
		switch {
		case secondaryError.MatchString(e):
			if o.firstSecondary == "" {
				o.firstSecondary = e
			}
		case o.firstErr == "":
			o.firstErr = e
			o.firstErrAt = frameLines(o.recent[stream])
		}
		o.lastErr = e
	}
	if o.recent == nil {
		o.recent = map[string][]string{}
	}
	kept := clip(e)
	if r, ok := o.recent[stream]; ok || len(o.recent) < recentStreams {
		o.recent[stream] = append(r[max(len(r)-recentLines+1, 0):], kept)
	}
	if agentLine || e == "" {
		return
	}
	o.tail = append(o.tail[max(len(o.tail)-tailLines+1, 0):], kept)
	if stream != "" {
		o.rankTail = append(o.rankTail[max(len(o.rankTail)-tailLines+1, 0):], clip(t))
	}
}

// maxKeptLine bounds each stderr line a Report keeps to quote in an error.
const maxKeptLine = 300

// clip cuts line to maxKeptLine bytes, at a rune boundary, marking the cut.
func clip(line string) string {
	if len(line) <= maxKeptLine {
		return line
	}
	cut := maxKeptLine
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut--
	}
	return line[:cut] + "…"
}

// frameLines are the traceback lines among recent (a rank's last lines before
// its exception line), from the first "File ..." line on: the frame that raised
// it, and the one that called it where that fits (nanoGPT's train.py runs
// configurator.py with exec, whose frame shows no source line).
func frameLines(recent []string) []string {
	for i, l := range recent {
		if strings.HasPrefix(l, "File ") {
			return slices.Clone(recent[i:])
		}
	}
	return nil
}

// secondaryError matches the errors a rank gets because another rank failed: its
// peer's connection closed or reset under a collective (gloo, NCCL, the c10d
// store), the communicator aborted, a collective timed out waiting, or torchrun
// stopping it after the failure.
var secondaryError = regexp.MustCompile(`(?i)connection (closed|reset) by peer|broken pipe|connection refused|` +
	`DistNetworkError|DistBackendError|NCCL communicator was aborted|Watchdog caught collective operation timeout|` +
	`SignalException|got signal: [0-9]+`)

// reason says why the job failed: the error line, with the traceback frame
// that raised it when the exception has no message of its own (a bare assert),
// or the last lines of stderr when no line is an error; the caller holds o.mu.
func (o *Report) reason() string {
	switch {
	case o.firstErr != "":
		if len(o.firstErrAt) > 0 && !strings.Contains(o.firstErr, ": ") {
			return o.firstErr + ", raised at " + strings.Join(o.firstErrAt, " | ")
		}
		return o.firstErr
	case o.firstSecondary != "":
		return o.firstSecondary
	case o.lastErr != "":
		return o.lastErr
	case len(o.rankTail) > 0:
		return "no error line on stderr; the ranks' last lines: " + strings.Join(o.rankTail, " | ")
	case len(o.tail) > 0:
		return "no error line on stderr; it ended with: " + strings.Join(o.tail, " | ")
	}
	return "nothing on stderr"
}

// bareException matches an exception's name alone, as Python prints an
// exception raised without a message (a failed assert: "AssertionError").
var bareException = regexp.MustCompile(`^(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?:Error|Exception|Interrupt)$`)

// isErrorLine matches an exception line ("RuntimeError: ...", "[1]:ValueError: ...",
// "AssertionError"), NCCL's watchdog timeouts, our own "fsdpbench:" lines and the
// run reaper's (a program that could not be started).
func isErrorLine(t string) bool {
	t = stripRankPrefix(t)
	if strings.HasPrefix(t, "fsdpbench:") || strings.HasPrefix(t, "fsdpbench run reaper:") ||
		strings.Contains(t, "Watchdog caught collective operation timeout") {
		return true
	}
	if bareException.MatchString(t) {
		return true
	}
	head, _, ok := strings.Cut(t, ": ")
	if !ok || strings.ContainsAny(head, " \t") {
		return false
	}
	return strings.HasSuffix(head, "Error") || strings.HasSuffix(head, "Exception") || strings.HasSuffix(head, "Interrupt")
}

// stripRankPrefix drops torchrun's tee prefixes: "[1]:" from torch 1.x, and
// "[default0]:[rank0]: " from torch 2.x, whose --tee names the role and local
// rank and whose ranks prefix their own traceback lines again.
func stripRankPrefix(t string) string {
	for strings.HasPrefix(t, "[") {
		i := strings.Index(t, "]:")
		if i <= 0 || i > 24 || strings.ContainsAny(t[1:i], " \t[") {
			break
		}
		t = strings.TrimSpace(t[i+2:])
	}
	return t
}

// program names what the job ran, for errors: the script, or the command's
// program.
func (j *Job) program() string {
	if j.o.Launcher == LauncherCommand && len(j.o.Command) > 0 {
		return filepath.Base(j.o.Command[0])
	}
	return filepath.Base(j.script)
}
