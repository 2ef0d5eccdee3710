package launch

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Files a Slurm run leaves in its run directory.
const (
	// ScriptFile is the batch script as submitted; `sbatch job.sbatch` resubmits it.
	ScriptFile = "job.sbatch"
	// JobIDFile holds the id of the run's current job, so that a restarted sweep
	// re-attaches to it instead of submitting the run twice.
	JobIDFile = "slurm_job_id"
)

// The shell expressions a job script gives backends for where their tasks run.
var slurmPlacement = backends.Placement{MasterAddr: "$MASTER_ADDR", NodeRank: "$SLURM_NODEID", JobID: "$SLURM_JOB_ID"}

// GPU request styles: --gres=gpu:N works on every Slurm; --gpus-per-node needs
// select/cons_tres.
const (
	GPURequestGres        = "gres"
	GPURequestGPUsPerNode = "gpus_per_node"
)

// DefaultPollInterval is how often a run's job state is read (scontrol show job).
const DefaultPollInterval = 3 * time.Second

// SlurmOptions are a spec's launcher_options for launcher: slurm.
type SlurmOptions struct {
	Partition, Account, QOS, Constraint string
	// Time is the job's time limit as Slurm writes it ("30", "1:30:00",
	// "1-00:00:00"); empty uses the run's timeout, rounded up to whole minutes.
	Time string
	// CPUsPerTask and Mem (e.g. "64G") are left to the cluster's defaults when unset.
	CPUsPerTask int
	Mem         string
	// GPURequest is GPURequestGres (default) or GPURequestGPUsPerNode.
	GPURequest string
	// SBatch lines are added to the script as they are, each after "#SBATCH "
	// (e.g. "--exclusive", "--reservation=bench").
	SBatch []string
	// Setup lines run before the job's command on the first node, and srun's
	// tasks inherit what they export (module load ..., source venv/bin/activate).
	Setup []string
	// PollInterval is how often the job's state is read; default DefaultPollInterval.
	PollInterval time.Duration
	// MaxQueue is how long a job may wait in the queue without starting before
	// the run gives up on it (cancels it, and fails, saying Slurm's reason);
	// default DefaultMaxQueue.
	MaxQueue time.Duration
}

// DefaultMaxQueue bounds a job's wait in the queue: generous, since a busy
// cluster can queue a job for hours, but not forever — a job pending on a down
// node never starts, and a sweep waiting on it silently would never end.
const DefaultMaxQueue = 24 * time.Hour

var slurmOptionKeys = []string{"account", "constraint", "cpus_per_task", "gpu_request", "max_queue", "mem", "partition",
	"poll_interval", "qos", "sbatch", "setup", "time"}

// slurmTime matches Slurm's time formats: minutes, minutes:seconds,
// hours:minutes:seconds, days-hours[:minutes[:seconds]].
var slurmTime = regexp.MustCompile(`^([0-9]+-)?[0-9]+(:[0-9]+){0,2}$`)

// ParseSlurmOptions reads launcher_options. Unknown keys and ill-typed or
// out-of-bounds values are *backends.SpecError values that name the key.
func ParseSlurmOptions(m map[string]any) (SlurmOptions, error) {
	o := SlurmOptions{GPURequest: GPURequestGres, PollInterval: DefaultPollInterval, MaxQueue: DefaultMaxQueue}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(slurmOptionKeys, k) {
			return o, backends.UnknownOption("launcher_options", "the slurm launcher", k, slurmOptionKeys)
		}
		if err := o.set(k, m[k]); err != nil {
			return o, backends.SpecErrorf("launcher_options.%s: %w", k, err)
		}
	}
	return o, nil
}

// Bounds of the numeric launcher_options.
const (
	maxCPUsPerTask  = 1 << 12
	maxTimeMinutes  = 366 * 24 * 60 // a year: anything longer is a typo
	minPollInterval = 100 * time.Millisecond
	maxPollInterval = time.Hour
	minMaxQueue     = time.Second
	maxMaxQueue     = 30 * 24 * time.Hour
)

func (o *SlurmOptions) set(k string, v any) error {
	var err error
	switch k {
	case "partition":
		o.Partition, err = word(v)
	case "account":
		o.Account, err = word(v)
	case "qos":
		o.QOS, err = word(v)
	case "constraint":
		o.Constraint, err = word(v)
	case "mem":
		o.Mem, err = word(v)
		if err == nil && o.Mem != "" { // "": the cluster's default, as when unset
			err = checkMem(o.Mem)
		}
	case "time":
		if _, isText := v.(string); !isText {
			n, err := backends.WholeIn(v, 1, maxTimeMinutes)
			o.Time = strconv.FormatInt(n, 10) // minutes, as sbatch reads a bare number
			return err
		}
		o.Time, err = word(v)
		if err == nil && !slurmTime.MatchString(o.Time) {
			err = fmt.Errorf("%q is not a Slurm time limit (minutes, \"1:30:00\" or \"1-00:00:00\")", o.Time)
		}
		if err == nil && strings.Trim(o.Time, "0:-") == "" {
			// sbatch reads a zero limit as none at all: a run could hold its nodes forever.
			err = fmt.Errorf("%q is no time limit (Slurm reads 0 as unlimited); give minutes, \"1:30:00\" or \"1-00:00:00\"", o.Time)
		}
	case "cpus_per_task":
		n, err := backends.WholeIn(v, 1, maxCPUsPerTask)
		o.CPUsPerTask = int(n)
		return err
	case "gpu_request":
		o.GPURequest, err = word(v)
		if err == nil && o.GPURequest != GPURequestGres && o.GPURequest != GPURequestGPUsPerNode {
			err = fmt.Errorf("%q: use %s (--gres=gpu:N) or %s (--gpus-per-node=N)", o.GPURequest, GPURequestGres, GPURequestGPUsPerNode)
		}
	case "sbatch":
		o.SBatch, err = lines(v)
		if err == nil {
			err = checkSBatch(o.SBatch)
		}
	case "setup":
		o.Setup, err = lines(v)
	case "poll_interval":
		o.PollInterval, err = backends.DurationIn(v, minPollInterval, maxPollInterval)
	case "max_queue":
		o.MaxQueue, err = backends.DurationIn(v, minMaxQueue, maxMaxQueue)
	default:
		return fmt.Errorf("unknown key (known: %s)", strings.Join(slurmOptionKeys, ", "))
	}
	return err
}

func word(v any) (string, error) {
	switch x := v.(type) {
	case string:
		if strings.ContainsAny(x, "\n\r") {
			return "", fmt.Errorf("%q holds a line break", x)
		}
		if c, ok := controlChar(x); ok {
			return "", fmt.Errorf("%q holds a control character (%U)", x, c)
		}
		return x, nil
	case int, int64, uint64:
		return fmt.Sprint(x), nil
	}
	return "", fmt.Errorf("want a string, got %v", v)
}

func lines(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("item %d: want a string, got %v", i, e)
			}
			out[i] = s
		}
		return out, nil
	case []string:
		return x, nil
	}
	return nil, fmt.Errorf("want a list of strings, got %v", v)
}

// controlChar is the first control character of s (a line break, a tab, an
// escape, NUL, U+0085, ...), if any.
func controlChar(s string) (rune, bool) {
	for _, c := range s {
		if unicode.IsControl(c) || c == '\u2028' || c == '\u2029' {
			return c, true
		}
	}
	return 0, false
}

// checkSBatch refuses sbatch items that are not one #SBATCH line each. sbatch
// reads directives only up to the first line of the script that is not one, so
// a line break inside an item would make its rest a command of the job (run on
// the first node, as the job's user) and silently drop every directive after
// it; other control characters have no business in an option either. An item
// must be an option (it starts with -): "#SBATCH exclusive" is not a directive
// sbatch reads.
func checkSBatch(items []string) error {
	for i, l := range items {
		if strings.ContainsAny(l, "\n\r\v\f\u0085\u2028\u2029") {
			return fmt.Errorf("item %d %q holds a line break: each item is one #SBATCH line, and what followed the break would run as a "+
				"command of the job script; give each option as its own item (sbatch: [\"--exclusive\", \"--comment=x\"])", i, l)
		}
		if c, ok := controlChar(l); ok {
			return fmt.Errorf("item %d %q holds a control character (%U): an #SBATCH line is printable text; remove it", i, l, c)
		}
		if !strings.HasPrefix(strings.TrimLeft(l, " "), "-") {
			return fmt.Errorf("item %d %q is not an sbatch option: each item is written after \"#SBATCH \" and must start with - "+
				"(\"--exclusive\", \"--reservation=bench\")", i, l)
		}
	}
	return nil
}

// slurmMem is sbatch's --mem: a whole number of megabytes, or of K, M, G or T
// (either case; Slurm reads only the unit's first letter, so "64GB" is 64G). 0
// asks for all the memory of each node.
var slurmMem = regexp.MustCompile(`^([0-9]+)(?:([KMGTkmgt])[Bb]?)?$`)

// maxMemMiB bounds launcher_options.mem at 1 EiB: no node has more, and Slurm
// keeps the request in megabytes in 64 bits, which a larger figure overflows.
const maxMemMiB = 1 << 40

// checkMem refuses a --mem that sbatch would refuse at submit time, after the
// sweep started ("Invalid --mem specification", one failed run per point), or
// read as something else.
func checkMem(mem string) error {
	m := slurmMem.FindStringSubmatch(mem)
	if m == nil {
		return fmt.Errorf("%q is not a Slurm memory size: give a whole number of megabytes, or one with a unit K, M, G or T "+
			"(\"64G\", \"512000M\"); 0 asks for all the memory of each node", mem)
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	scale := map[string]uint64{"": 1 << 20, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[strings.ToLower(m[2])]
	if err != nil || n > maxMemMiB<<20/scale {
		return fmt.Errorf("%q is more memory than any node has (at most 1 EiB, %dT); give the node's memory in G, or 0 for all of it", mem, maxMemMiB>>20)
	}
	return nil
}

// timeLimit is the job's --time: the option, or the run's timeout rounded up to
// whole minutes (Slurm's granularity), or none.
func (o SlurmOptions) timeLimit(rc sweeps.RunConfig) string {
	if o.Time != "" {
		return o.Time
	}
	d := time.Duration(rc.Timeout)
	if d <= 0 {
		return ""
	}
	mins := int((d + time.Minute - 1) / time.Minute)
	return fmt.Sprintf("%d:%02d:00", mins/60, mins%60)
}

// JobName is the Slurm job name of a run: squeue shows it, and a restarted sweep
// finds the run's job by it.
func JobName(rc sweeps.RunConfig) string { return "fsdpbench-" + rc.ID }

// Script is the batch script of one repeat of rc: the allocation (#SBATCH lines
// from the run and the options), the setup lines, the first node as MASTER_ADDR,
// the job's environment, and one srun that starts spec's tasks on every node.
func (o SlurmOptions) Script(rc sweeps.RunConfig, backend string, spec backends.JobSpec, runDir string) string {
	nodes := max(rc.Nodes, 1)
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("#!/bin/bash")
	p("# fsdpbench run %s of sweep %s, backend %s: %d node(s), %d task(s) per node.", rc.ID, rc.Sweep, backend, nodes, spec.TasksPerNode)
	p("# Written by fsdpbench, which submits and follows it; `sbatch %s` resubmits it by hand.", ScriptFile)
	p("# fingerprint: %s (a restarted sweep re-attaches to this job only while the run's config matches)", rc.Fingerprint())
	p("#SBATCH --job-name=%s", JobName(rc))
	p("#SBATCH --nodes=%d", nodes)
	p("#SBATCH --ntasks-per-node=%d", spec.TasksPerNode)
	if spec.GPUsPerNode > 0 {
		if o.GPURequest == GPURequestGPUsPerNode {
			p("#SBATCH --gpus-per-node=%d", spec.GPUsPerNode)
		} else {
			p("#SBATCH --gres=gpu:%d", spec.GPUsPerNode)
		}
	}
	for _, f := range []struct{ flag, v string }{
		{"cpus-per-task", itoaPositive(o.CPUsPerTask)}, {"mem", o.Mem}, {"time", o.timeLimit(rc)},
		{"partition", o.Partition}, {"account", o.Account}, {"qos", o.QOS}, {"constraint", o.Constraint},
	} {
		if f.v != "" {
			p("#SBATCH --%s=%s", f.flag, f.v)
		}
	}
	p("#SBATCH --chdir=%s", runDir)
	p("#SBATCH --output=%s/slurm-%%j.out", runDir)
	p("#SBATCH --error=%s/slurm-%%j.err", runDir)
	// A run requeued after a node failure would start again from step 0 under the same
	// job, its first attempt's output mixed into the second's, and wait in the queue
	// until the node is back: a benchmark reports the failure instead (naming the
	// node), and running the sweep again reruns it.
	p("#SBATCH --no-requeue")
	for _, l := range o.SBatch {
		p("#SBATCH %s", l)
	}
	p("set -eo pipefail")
	if len(o.Setup) > 0 {
		p("")
		for _, l := range o.Setup {
			p("%s", l)
		}
	}
	p("")
	p("# Rank 0 (and the rendezvous) live on the first node of the allocation.")
	p(`export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"`)
	p("export MASTER_PORT=$((15000 + SLURM_JOB_ID %% 10000))")
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		p("export %s=%s", k, shellWord(v))
	}
	if len(rc.Env) > 0 {
		// The spec's variables (env:), literally: a $ in one is not expanded.
		p("# The run's environment from the spec.")
		names := slices.Sorted(maps.Keys(rc.Env))
		for _, k := range names {
			p("export %s=%s", k, literalWord(rc.Env[k]))
		}
	}
	if spec.Dir != "" && spec.Dir != runDir {
		p("cd %s", shellWord(spec.Dir))
	}
	p("")
	// --kill-on-bad-exit: one rank that dies takes the others down, as the local
	// launcher does, instead of leaving them blocked in a collective until the
	// time limit. --label prefixes every line with its task, which the harness
	// reads back.
	// --export=ALL: the tasks get the script's environment, the exports above
	// included, even when sbatch ran with --export=NONE (an #SBATCH line of the
	// options, or the site's default), which srun would otherwise inherit
	// through SLURM_EXPORT_ENV and start the tasks without them.
	srun := "srun --export=ALL --label --kill-on-bad-exit=1"
	cmd := commandLine(spec.Argv)
	if perNode(spec.Argv) {
		// The node's own values ($SLURM_NODEID) exist only inside each task, so
		// the command goes to a shell there.
		p("%s bash -c '\nexec %s'", srun, strings.ReplaceAll(cmd, "'", `'\''`))
	} else {
		p("%s \\\n  %s", srun, cmd)
	}
	return b.String()
}

func itoaPositive(n int) string {
	if n <= 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// perNode reports whether an argument names a value that differs between tasks.
func perNode(argv []string) bool {
	for _, a := range argv {
		if strings.Contains(a, "$SLURM_") {
			return true
		}
	}
	return false
}

// commandLine renders argv for the shell: the program and its leading words on
// the first line, then one "--flag value" (or positional argument, the script)
// per line.
func commandLine(argv []string) string {
	var b strings.Builder
	long, value := false, false // a --flag was seen; the next word is a flag's value
	for i, a := range argv {
		if i > 0 {
			brk := false
			switch {
			case strings.HasPrefix(a, "--"):
				brk = true
			case strings.HasPrefix(a, "-"), value:
			default:
				brk = long
			}
			if brk {
				b.WriteString(" \\\n    ")
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(shellWord(a))
		flag := strings.HasPrefix(a, "-") && len(a) > 1
		long = long || strings.HasPrefix(a, "--")
		value = flag && !strings.Contains(a, "=")
	}
	return b.String()
}

var (
	plainWord = regexp.MustCompile(`^[A-Za-z0-9_./:=,+@%-]+$`)
	// placementVar is a variable a job script leaves for the shell to expand.
	placementVar = regexp.MustCompile(`\$(MASTER_ADDR|MASTER_PORT|SLURM_[A-Z_]+)`)
)

// shellWord quotes s for bash: as it is when nothing in it is special, in double
// quotes when it names the job's variables ($MASTER_ADDR, $SLURM_NODEID), in
// single quotes otherwise.
func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	if placementVar.MatchString(s) {
		var b strings.Builder
		b.WriteByte('"')
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case c == '$' && placementVar.MatchString(s[i:]) && placementVar.FindStringIndex(s[i:])[0] == 0:
				b.WriteByte(c)
			case c == '"' || c == '\\' || c == '`' || c == '$':
				b.WriteByte('\\')
				b.WriteByte(c)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
		return b.String()
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// literalWord quotes s for bash so that it stays as it is: unquoted when
// nothing in it is special, in single quotes otherwise.
func literalWord(s string) string {
	if s != "" && plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
