package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
	"github.com/fsdpbench/fsdpbench/termsafe"
)

// slurmCommandTimeout bounds one call of sbatch, scontrol, squeue or scancel: a
// controller that does not answer must not hang the sweep.
const slurmCommandTimeout = 30 * time.Second

// cancelWait is how long an interrupted run waits for its cancelled job to leave
// squeue; the harness's grace (10 s) must cover it and scancel.
const cancelWait = 7 * time.Second

// CheckSlurm says whether this host can submit jobs: the Slurm client commands
// must be on PATH.
func CheckSlurm() error {
	for _, c := range []string{"sbatch", "scontrol", "squeue", "scancel"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("launcher slurm: %s is not on PATH; run fsdpbench on a Slurm login node (or use launcher: local, e.g. --set launcher=local)", c)
		}
	}
	return nil
}

// Slurm runs each repeat of a run as one Slurm job: it writes the job script
// into the run directory, submits it with sbatch, follows its state with
// scontrol (sacct only as a fallback, since many clusters have no accounting
// storage), feeds the job's output back to the backend as it grows, and
// cancels the job when the run's context ends.
//
// A job that a previous invocation of the sweep submitted (slurm_job_id) and
// whose result was never recorded is not submitted again: still queued or
// running, it is re-attached; ended (COMPLETED, FAILED, TIMEOUT, OUT_OF_MEMORY,
// NODE_FAIL, ...), it is collected from Slurm's state and the output it left.
// Only a job that Slurm cancelled (Ctrl-C, scancel) or that never existed is
// submitted anew. A job counts as recorded once the harness says so (Recorded:
// its id is in the run's metrics.json) or once this launcher has followed it to
// its end. The run directory must be on a file system the nodes share. Safe for
// concurrent runs.
type Slurm struct {
	mu   sync.Mutex
	live map[string]bool
	// done holds the jobs whose result is recorded or was returned: never
	// collected again (the next repeat of a run submits its own job).
	done map[string]bool
}

// NewSlurm returns a Slurm launcher.
func NewSlurm() *Slurm { return &Slurm{live: map[string]bool{}, done: map[string]bool{}} }

// ExtraJobID is the Result.Extra (and so metrics.json extra) key holding the
// Slurm job a repeat ran as. A run's metrics.json naming its last job tells a
// resumed sweep that the job's result is recorded: Recorded.
const ExtraJobID = "slurm_job_id"

// Recorded tells the launcher that job id's result is stored (the harness read
// it from the run's metrics.json): a resumed run must not collect it again.
func (s *Slurm) Recorded(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done[id] = true
}

func (s *Slurm) isDone(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[id]
}

// Pending reports whether rc has a job from an earlier invocation that Run will
// re-attach or collect rather than submit, so that the caller keeps the files
// that job writes (ranks/) when it clears the run's previous attempt.
func (s *Slurm) Pending(rc sweeps.RunConfig, runDir string) bool {
	abs, err := filepath.Abs(runDir)
	if err != nil {
		return false
	}
	id, _ := s.previous(rc, abs, func(string, ...any) {}, false)
	return id != ""
}

// CancelAll cancels every job this launcher submitted or re-attached that has not
// ended: the harness's last word on an interrupted sweep.
func (s *Slurm) CancelAll() {
	s.mu.Lock()
	ids := make([]string, 0, len(s.live))
	for id := range s.live {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	sort.Strings(ids)
	if len(ids) > 0 {
		_, _ = slurmCmd("scancel", ids...)
	}
}

func (s *Slurm) track(id string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.live[id] = true
	} else {
		delete(s.live, id)
	}
}

// Run executes one repeat of rc as a Slurm job. The run's own timeout is the
// job's time limit (queueing does not count), so ctx should carry none.
func (s *Slurm) Run(ctx context.Context, be backends.JobBackend, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
	res := results.Result{WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode, TokensPerStep: rc.TokensPerStep()}
	if emit == nil {
		emit = func(backends.Event) {}
	}
	opts, err := ParseSlurmOptions(rc.LauncherOptions)
	if err != nil {
		return res, err
	}
	runDir, err := filepath.Abs(env.RunDir)
	if err != nil {
		return res, err
	}
	env.RunDir = runDir
	logf := func(format string, a ...any) {
		if env.Stderr != nil {
			fmt.Fprintf(env.Stderr, "fsdpbench: "+format+"\n", a...)
		}
	}
	place := slurmPlacement
	place.Nodes = max(rc.Nodes, 1)

	id, ended := s.previous(rc, runDir, logf, true)
	job, err := be.PrepareJob(ctx, rc, env, place, id != "")
	if err != nil {
		return res, err
	}
	switch {
	case id != "" && ended:
		logf("collecting Slurm job %s, which ended while no fsdpbench followed it (submitted by an earlier invocation of the sweep); it is not submitted again", id)
	case id != "":
		logf("re-attached to Slurm job %s (submitted by an earlier invocation of the sweep)", id)
	default:
		script := filepath.Join(runDir, ScriptFile)
		text := opts.Script(rc, be.Name(), job.Spec(), runDir)
		if err := os.WriteFile(script, []byte(text), 0o666); err != nil { // the umask decides
			return res, fmt.Errorf("slurm: write the job script: %w", err)
		}
		if id, err = submit(script); err != nil {
			return res, err
		}
		// Recorded at once: a sweep killed from here on finds the job again.
		if err := results.WriteFileAtomic(filepath.Join(runDir, JobIDFile), []byte(id+"\n")); err != nil {
			logf("recording the job id: %v", err)
		}
		logf("submitted Slurm job %s (%s)", id, script)
	}
	s.track(id, true)
	defer s.track(id, false)
	res, err = s.follow(ctx, rc, id, ended, job, env, opts, emit, logf)
	if err != nil {
		// Lost track of the job (the controller did not answer): it may still
		// run, and its result is not this one, so a resumed sweep collects it.
		return res, err
	}
	// Followed to its end (or cancelled): the next repeat submits its own job.
	s.Recorded(id)
	if res.Extra == nil {
		res.Extra = map[string]any{}
	}
	res.Extra[ExtraJobID] = id
	return res, err
}

// previous is the id of a job of this run that an earlier invocation submitted
// with the same configuration and whose result is not recorded, and whether it
// has ended; "" when there is none and the run must be submitted. A job still
// queued or running is re-attached; one that ended is collected, unless Slurm
// cancelled it (Ctrl-C, scancel: it did not finish, so it runs again). With
// act set, a queued or running job of a changed configuration is cancelled.
func (s *Slurm) previous(rc sweeps.RunConfig, runDir string, logf func(string, ...any), act bool) (string, bool) {
	id := ""
	if data, err := input.ReadFile(filepath.Join(runDir, JobIDFile), input.Limits{What: "job id file", MaxBytes: 1 << 10}); err == nil {
		id = strings.TrimSpace(string(data))
	} else {
		// Killed between sbatch and recording the id: the job is found by its
		// name and directory, among those Slurm still knows (-t all: ended
		// ones too); the latest is this attempt's.
		out, err := slurmCmd("squeue", "--me", "-h", "-t", "all", "--name="+JobName(rc), "-o", "%i %Z")
		if err == nil {
			latest := uint64(0)
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(line)
				if len(f) != 2 || filepath.Clean(f[1]) != runDir {
					continue
				}
				if n, perr := strconv.ParseUint(f[0], 10, 64); perr == nil && n > latest {
					latest, id = n, f[0]
				}
			}
		}
	}
	if id == "" || s.isDone(id) {
		return "", false
	}
	script, _ := input.ReadFile(filepath.Join(runDir, ScriptFile), input.Limits{What: "job script", MaxBytes: 1 << 20})
	sameConfig := bytes.Contains(script, []byte("# fingerprint: "+rc.Fingerprint()+" "))
	info, err := queryJob(id)
	if errors.Is(err, errJobUnknown) {
		// Slurm has forgotten the job. If it left output it ran, and ran long
		// ago: collect it (hours of GPUs are not spent again); if not, it never
		// started (a controller restarted without its state) and is submitted.
		if _, serr := os.Stat(filepath.Join(runDir, "slurm-"+id+".out")); serr == nil && sameConfig {
			return id, true
		}
		return "", false
	}
	if err != nil || info.Name != JobName(rc) {
		return "", false
	}
	if !sameConfig {
		if act && info.active() {
			logf("Slurm job %s runs an older configuration of this run; cancelling it", id)
			_, _ = slurmCmd("scancel", id)
		}
		return "", false
	}
	switch {
	case info.active():
		return id, false
	case info.State == "CANCELLED":
		return "", false
	}
	return id, true
}

// submit sbatches script from its directory and returns the job id.
func submit(script string) (string, error) {
	out, err := slurmCmdIn(filepath.Dir(script), "sbatch", "--parsable", script)
	if err != nil {
		var d *DaemonError
		if errors.As(err, &d) {
			return "", fmt.Errorf("slurm: submitting %s: %w", script, err)
		}
		return "", fmt.Errorf("slurm: sbatch %s: %w (check launcher_options: partition, account, qos, time, against `sinfo`)", script, err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";") // "id" or "id;cluster"
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return "", fmt.Errorf("slurm: sbatch --parsable printed %q, not a job id", out)
	}
	return id, nil
}

// follow polls job id until it ends, streaming its output to the backend and the
// run's logs, and turns its end into the repeat's Result.
// ended says the job ended before it was followed (previous).
func (s *Slurm) follow(ctx context.Context, rc sweeps.RunConfig, id string, ended bool, job backends.Job, env backends.RunEnv,
	opts SlurmOptions, emit func(backends.Event), logf func(string, ...any)) (results.Result, error) {
	poll := opts.PollInterval
	outs := []*tail{
		{path: filepath.Join(env.RunDir, "slurm-"+id+".out"), stream: "stdout", sink: env.Stdout},
		{path: filepath.Join(env.RunDir, "slurm-"+id+".err"), stream: "stderr", sink: env.Stderr},
	}
	// srun's own lines (unlabelled, on stderr) say when it could not start the
	// tasks on a node: the cause of the job's failure, which the ranks' output
	// does not know.
	var launch launchFailures
	drain := func(final bool) {
		for _, t := range outs {
			t.read(final, func(stream string, task int, line string) {
				launch.see(stream, task, line)
				for _, ev := range job.Line(stream, task, line) {
					emit(ev)
				}
			})
		}
	}
	res := results.Result{WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode, TokensPerStep: rc.TokensPerStep()}
	var started time.Time
	// queued is when this invocation began to wait for the job to start; reason
	// is the last pending reason shown.
	queued, reason := time.Now(), ""
	misses := 0
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		info, err := queryJob(id)
		drain(false)
		if ended && errors.Is(err, errJobUnknown) {
			// Collected after Slurm forgot it: its output is all there is.
			info, err = jobInfo{State: stateForgotten}, nil
		}
		switch {
		case err != nil:
			misses++
			if misses >= 5 {
				return res, fmt.Errorf("slurm: job %s: %w", id, err)
			}
		case info.State == "RUNNING" && started.IsZero():
			misses = 0
			started = time.Now()
			if !info.Start.IsZero() && info.Start.Before(started) && started.Sub(info.Start) < poll+time.Minute {
				// Slurm's start time, when it is plausible: the job may have
				// started up to a poll interval before it was seen running.
				started = info.Start
			}
			emit(backends.Event{Kind: backends.EventStarted, Time: started})
		case info.State == "PENDING" && started.IsZero():
			misses = 0
			if info.Reason != reason {
				reason = info.Reason
				logf("Slurm job %s is queued (reason: %s)", id, reason)
				emit(backends.Event{Kind: backends.EventQueued, Time: time.Now(), Reason: reason})
			}
			if waited := time.Since(queued); waited > opts.MaxQueue {
				cancelJob(id)
				drain(true)
				res.Status = results.StatusFailed
				res.Error = fmt.Sprintf("Slurm job %s waited %s in the queue without starting (reason: %s) and was cancelled; "+
					"see `sinfo -R` and `squeue -j %s` for why, or raise launcher_options.max_queue (default %s); running the sweep again resubmits it",
					id, waited.Round(time.Second), reason, id, DefaultMaxQueue)
				logf("%s", res.Error)
				return res, nil
			}
		case info.terminal():
			drain(true)
			res = s.finish(rc, id, info, job, &launch, logf)
			// A job collected after it ended was never seen running here:
			// Slurm's times say when it ran.
			if res.Started.IsZero() {
				res.Started = started
				if started.IsZero() {
					res.Started = info.Start
				}
			}
			if res.Finished.IsZero() {
				res.Finished = info.End
				if res.Finished.IsZero() || !started.IsZero() {
					res.Finished = time.Now()
				}
			}
			emit(backends.Event{Kind: backends.EventFinished, Time: time.Now(), Status: res.Status})
			return res, nil
		default:
			misses = 0
		}
		select {
		case <-ctx.Done():
			cancelJob(id)
			drain(true)
			res.Status, res.Error = results.StatusCanceled, fmt.Sprintf("Slurm job %s cancelled: %v", id, context.Cause(ctx))
			logf("cancelled Slurm job %s", id)
			return res, nil
		case <-ticker.C:
		}
	}
}

// finish maps how job id ended (Slurm's state, then the run's own output) to the
// repeat's Result.
// launch holds srun's launch failures read from the job's output.
func (s *Slurm) finish(rc sweeps.RunConfig, id string, info jobInfo, job backends.Job, launch *launchFailures, logf func(string, ...any)) results.Result {
	warn := func(msg string) { logf("%s", msg) }
	if info.State != stateForgotten {
		logf("Slurm job %s ended %s (exit code %d:%d, reason %s)", id, info.State, info.ExitCode, info.Signal, info.Reason)
	}
	res := results.Result{WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode, TokensPerStep: rc.TokensPerStep()}
	switch info.State {
	case "COMPLETED":
		return job.Finish(nil, warn)
	case stateForgotten:
		warn(fmt.Sprintf("Slurm no longer knows job %s (it ended longer ago than MinJobAge, and there is no accounting storage to ask): "+
			"its exit code is unknown and its result is read from its output alone", id))
		return job.Finish(nil, warn)
	case "FAILED":
		if launch.failed() {
			// srun could not start the tasks on a node (its slurmd does not
			// answer: a node that crashed and that Slurm has not marked down
			// yet). The ranks that did start were killed by srun, and what they
			// say ("rank 0 exited with code 0") is not the cause: the node is.
			res := job.Finish(fmt.Errorf("Slurm job %s failed with exit code %d", id, info.ExitCode), warn)
			res.Status = results.StatusFailed
			res.Error = fmt.Sprintf("Slurm job %s failed: %s", id, launch.describe())
			return res
		}
		// The run's output says more than the exit code: out of memory,
		// infeasible, the rank that failed first.
		return job.Finish(fmt.Errorf("Slurm job %s failed with exit code %d", id, info.ExitCode), warn)
	case "TIMEOUT", "DEADLINE":
		res.Status = results.StatusTimeout
		res.Error = fmt.Sprintf("Slurm job %s reached its time limit (%s); raise the spec's timeout or launcher_options.time", id, info.TimeLimit)
	case "OUT_OF_MEMORY":
		res.Status = results.StatusOOM
		res.Error = fmt.Sprintf("Slurm job %s ran out of host memory (its --mem or the node's); raise launcher_options.mem", id)
	case "CANCELLED":
		res.Status = results.StatusCanceled
		res.Error = fmt.Sprintf("Slurm job %s was cancelled outside fsdpbench (scancel, or an administrator); running the sweep again reruns it", id)
	case "NODE_FAIL", "BOOT_FAIL":
		// The ranks that outlived the node say which rank they lost and where; the
		// run's output comes first, Slurm's view of the node after it.
		nodes := failedNodes(info.NodeList)
		if launch.failed() {
			nodes += "; srun: " + launch.lines()
		}
		return job.Finish(fmt.Errorf("Slurm job %s ended %s: %s; running the sweep again reruns it", id, info.State, nodes), warn)
	case "PREEMPTED":
		res.Status = results.StatusFailed
		res.Error = fmt.Sprintf("Slurm job %s was preempted by a job of higher priority; running the sweep again reruns it", id)
	default:
		res.Status = results.StatusFailed
		res.Error = fmt.Sprintf("Slurm job %s ended in state %s (reason %s)", id, info.State, info.Reason)
	}
	return res
}

// cancelJob scancels id and waits, briefly, until squeue no longer lists it.
func cancelJob(id string) {
	_, _ = slurmCmd("scancel", id)
	deadline := time.Now().Add(cancelWait)
	for time.Now().Before(deadline) {
		out, err := slurmCmd("squeue", "-h", "-j", id, "-o", "%T")
		if err != nil || strings.TrimSpace(out) == "" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stateForgotten stands for the state of a job Slurm no longer knows, collected
// from its output (previous).
const stateForgotten = "FORGOTTEN"

// jobInfo is what scontrol (or sacct) says about a job.
type jobInfo struct {
	Name, State, Reason, TimeLimit, NodeList, WorkDir string
	ExitCode, Signal                                  int
	// Start and End are when the job ran, when Slurm says (zero otherwise).
	Start, End time.Time
}

// active reports whether the job may still run: queued, running, or on its way.
func (j jobInfo) active() bool {
	switch j.State {
	case "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
		"REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "STOPPED":
		return true
	}
	return false
}

// terminal reports whether the job has ended for good.
func (j jobInfo) terminal() bool { return j.State != "" && !j.active() }

var (
	scontrolField = regexp.MustCompile(`(?:^|\s)(JobName|JobState|Reason|ExitCode|TimeLimit|NodeList|WorkDir|StartTime|EndTime)=(\S*)`)
	errJobUnknown = errors.New("Slurm knows no such job (it ended longer ago than MinJobAge, and there is no accounting storage to ask)")
)

// queryJob reads job id's state from scontrol show job, or from sacct when the
// controller has forgotten it.
func queryJob(id string) (jobInfo, error) {
	out, err := slurmCmd("scontrol", "show", "job", "-o", id)
	if err == nil {
		return parseScontrol(out)
	}
	if !strings.Contains(err.Error(), "Invalid job id") {
		return jobInfo{}, err
	}
	if _, lerr := exec.LookPath("sacct"); lerr == nil {
		if out, serr := slurmCmd("sacct", "-n", "-P", "-X", "-j", id, "-o", "JobName,State,ExitCode"); serr == nil {
			if info, ok := parseSacct(out); ok {
				return info, nil
			}
		}
	}
	return jobInfo{}, errJobUnknown
}

// parseScontrol reads `scontrol show job -o` (one line of Key=Value fields).
func parseScontrol(out string) (jobInfo, error) {
	var j jobInfo
	for _, m := range scontrolField.FindAllStringSubmatch(out, -1) {
		switch m[1] {
		case "JobName":
			j.Name = m[2]
		case "JobState":
			j.State = m[2]
		case "Reason":
			j.Reason = m[2]
		case "TimeLimit":
			j.TimeLimit = m[2]
		case "NodeList":
			j.NodeList = m[2]
		case "WorkDir":
			j.WorkDir = m[2]
		case "ExitCode":
			j.ExitCode, j.Signal = exitCode(m[2])
		case "StartTime":
			j.Start = parseSlurmTime(m[2])
		case "EndTime":
			j.End = parseSlurmTime(m[2])
		}
	}
	if j.State == "" {
		return j, fmt.Errorf("scontrol show job printed no JobState: %q", out)
	}
	return j, nil
}

// parseSacct reads `sacct -n -P -X -o JobName,State,ExitCode`.
func parseSacct(out string) (jobInfo, bool) {
	f := strings.Split(strings.TrimSpace(out), "|")
	if len(f) != 3 || f[1] == "" {
		return jobInfo{}, false
	}
	state, _, _ := strings.Cut(f[1], " ") // "CANCELLED by 0"
	j := jobInfo{Name: f[0], State: state}
	j.ExitCode, j.Signal = exitCode(f[2])
	return j, true
}

// parseSlurmTime reads a time as scontrol prints it (local, "2006-01-02T15:04:05");
// "Unknown", "None" and the like are zero.
func parseSlurmTime(v string) time.Time {
	t, err := time.ParseInLocation("2006-01-02T15:04:05", v, time.Local)
	if err != nil {
		return time.Time{}
	}
	return t
}

// exitCode splits Slurm's "code:signal".
func exitCode(s string) (int, int) {
	a, b, _ := strings.Cut(s, ":")
	code, _ := strconv.Atoi(a)
	sig, _ := strconv.Atoi(b)
	return code, sig
}

func slurmCmd(name string, args ...string) (string, error) { return slurmCmdIn("", name, args...) }

// slurmCmdIn runs a Slurm client command; its error carries what it printed.
func slurmCmdIn(dir, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), slurmCommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		if d := daemonDown(name, msg); d != nil {
			return stdout.String(), d
		}
		return stdout.String(), fmt.Errorf("%s %s: %s", name, strings.Join(args, " "), msg)
	}
	return stdout.String(), nil
}

// DaemonError is a Slurm command that failed because a daemon it needs on this
// host or the controller is not there (munged, slurmctld): the spec is not the
// cause, and every run would fail the same way until the daemon is started.
type DaemonError struct {
	Command string // the Slurm command that failed: sbatch, scontrol, ...
	Daemon  string // munged or slurmctld
	Cause   string // Slurm's own line saying so
	Fix     string // what to do
}

func (e *DaemonError) Error() string {
	return fmt.Sprintf("%s failed: %s (%s): %s", e.Command, e.Daemon, e.Cause, e.Fix)
}

// mungeFailed and noController are the lines Slurm's commands print when munged
// does not answer on this host and when slurmctld does not answer.
var (
	mungeFailed  = regexp.MustCompile(`Munge (?:encode|decode) failed: [^\n]*`)
	noController = regexp.MustCompile(`Unable to contact slurm controller[^\n]*`)
)

// daemonDown reads a failed Slurm command's stderr for a missing daemon; nil
// when the failure is something else.
func daemonDown(command, stderr string) *DaemonError {
	if m := mungeFailed.FindString(stderr); m != "" {
		return &DaemonError{Command: command, Daemon: "munged, the authentication daemon Slurm's commands need on this host, is not running or does not answer",
			Cause: m, Fix: "start it (sudo systemctl start munge; without systemd: sudo -u munge /usr/sbin/munged; on a test machine .ci/cluster start) and check it with `munge -n | unmunge`; launcher_options are not the cause"}
	}
	if m := noController.FindString(stderr); m != "" {
		return &DaemonError{Command: command, Daemon: "slurmctld, the Slurm controller, does not answer",
			Cause: m, Fix: "check it with `scontrol ping`, start it (sudo systemctl start slurmctld) or fix SlurmctldHost in slurm.conf; launcher_options are not the cause"}
	}
	return nil
}

// tail follows one of a job's output files as Slurm appends to it.
type tail struct {
	path   string
	stream string
	sink   io.Writer
	off    int64
	part   []byte // a line not finished yet: its first contract.MaxLineBytes at most
	cut    int64  // bytes of that line past part, dropped
}

// tailChunk is how much of a job's output file read takes at once, so that memory
// stays bounded however fast the job writes.
const tailChunk = 1 << 20

// srunLabel is srun --label's prefix: the task's index.
var srunLabel = regexp.MustCompile(`^\s*([0-9]+): `)

// read hands every complete new line to f (and copies it to the sink); final
// also hands over an unfinished last line.
// Lines are bounded as every reader of run output bounds them (contract.ScanLines):
// a longer one is handed cut, saying how long it was.
func (t *tail) read(final bool, f func(stream string, task int, line string)) {
	if fh, err := os.Open(t.path); err == nil {
		if _, err := fh.Seek(t.off, io.SeekStart); err == nil {
			buf := make([]byte, tailChunk)
			for {
				n, err := io.ReadFull(fh, buf)
				t.off += int64(n)
				t.part = append(t.part, buf[:n]...)
				t.lines(f)
				if err != nil {
					break
				}
			}
		}
		fh.Close()
	}
	if final && (len(t.part) > 0 || t.cut > 0) {
		t.line(contract.CutPrefix(string(t.part), int64(len(t.part))+t.cut), f)
		t.part, t.cut = nil, 0
	}
}

// lines hands on every complete line in part, and keeps of the unfinished one
// only its first contract.MaxLineBytes.
func (t *tail) lines(f func(stream string, task int, line string)) {
	for {
		i := bytes.IndexByte(t.part, '\n')
		if i < 0 {
			break
		}
		t.line(contract.CutPrefix(string(t.part[:i]), int64(i)+t.cut), f)
		t.part, t.cut = t.part[i+1:], 0
	}
	if over := len(t.part) - contract.MaxLineBytes; over > 0 {
		t.cut += int64(over)
		t.part = t.part[:contract.MaxLineBytes:contract.MaxLineBytes]
	}
}

func (t *tail) line(line string, f func(string, int, string)) {
	if t.sink != nil {
		_, _ = io.WriteString(t.sink, line+"\n")
	}
	task := -1
	if m := srunLabel.FindStringSubmatchIndex(line); m != nil {
		task, _ = strconv.Atoi(line[m[2]:m[3]])
		line = line[m[1]:]
	}
	f(t.stream, task, line)
}

// failedNodes names the nodes of list that Slurm marks down or failed, with its
// reason ("node fsdp-node2 is down (Not responding)"), or the whole allocation when
// it cannot tell.
func failedNodes(list string) string {
	out, err := slurmCmd("sinfo", "-h", "-N", "-n", list, "-t", "down,drain,fail,no_respond", "-o", "%N|%T|%E")
	var named []string
	seen := map[string]bool{} // a node in two partitions is listed twice
	if err == nil {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.SplitN(line, "|", 3); len(f) == 3 && !seen[f[0]] {
				seen[f[0]] = true
				named = append(named, fmt.Sprintf("node %s is %s (%s)", f[0], f[1], f[2]))
			}
		}
	}
	if len(named) == 0 {
		return "a node of " + list + " failed"
	}
	return strings.Join(named, "; ")
}

// srunLaunchFailed matches srun's line for a node on which it could not start a
// step's tasks: "srun: error: Task launch for StepId=3.0 failed on node
// fsdp-node2: Communication connection failure" (Slurm before 20.11 wrote the
// step as "3.0"). It is printed on the job's stderr, unlabelled, and nowhere
// else: Slurm's job state says only FAILED, with srun's exit code.
var srunLaunchFailed = regexp.MustCompile(`^srun: error: (Task launch for (?:StepId=)?\S+ failed on node ([^\s:]+): (.*\S))\s*$`)

// nodeUnreachable matches the launch failures that mean the node's slurmd did
// not answer, rather than that it refused the step.
var nodeUnreachable = regexp.MustCompile(`(?i)communication connection failure|connection refused|timed out|no route to host|network is unreachable|zero bytes were transmitted`)

// maxLaunchFailures bounds the launch failures a job's status names: one per
// node, the first few nodes (a job on hundreds of nodes of a dead rack would
// otherwise list them all).
const maxLaunchFailures = 4

// launchFailures collects srun's launch failures, one per node, from a job's
// stderr.
type launchFailures struct {
	nodes []string // in the order srun reported them, at most maxLaunchFailures
	line  map[string]string
	more  int // nodes past maxLaunchFailures
}

// see records a line of the job's output if it is srun's launch failure for a
// node not seen yet. Only srun's own lines count (stderr, no task label): a
// rank that prints the same words is not srun.
func (l *launchFailures) see(stream string, task int, line string) {
	if stream != "stderr" || task >= 0 {
		return
	}
	m := srunLaunchFailed.FindStringSubmatch(line)
	if m == nil {
		return
	}
	if l.line == nil {
		l.line = map[string]string{}
	}
	node := m[2]
	if _, ok := l.line[node]; ok {
		return
	}
	if len(l.nodes) >= maxLaunchFailures {
		l.more++
		l.line[node] = "" // counted once
		return
	}
	l.nodes = append(l.nodes, node)
	l.line[node] = m[1]
}

func (l *launchFailures) failed() bool { return len(l.nodes) > 0 }

// lines is srun's own words, one failure per node, joined.
func (l *launchFailures) lines() string {
	out := make([]string, 0, len(l.nodes))
	for _, n := range l.nodes {
		out = append(out, termsafe.Line(l.line[n]))
	}
	s := strings.Join(out, "; ")
	if l.more > 0 {
		s += fmt.Sprintf("; and on %d more node(s) (see stderr.log)", l.more)
	}
	return s
}

// describe is the run's error for a job whose tasks srun could not start: the
// node(s), srun's line, and what to do.
func (l *launchFailures) describe() string {
	nodes := strings.Join(l.nodes, ", ")
	if l.more > 0 {
		nodes += fmt.Sprintf(" and %d more", l.more)
	}
	unreachable := false
	for _, n := range l.nodes {
		unreachable = unreachable || nodeUnreachable.MatchString(l.line[n])
	}
	msg := fmt.Sprintf("srun could not start the run's tasks on node %s (%s)", termsafe.Line(nodes), l.lines())
	if unreachable {
		msg += "; the node's slurmd does not answer: the node may have crashed or lost its network before Slurm marked it down " +
			"(Slurm waits SlurmdTimeout first)"
	}
	return msg + fmt.Sprintf("; see `sinfo -N -n %s` and `scontrol show node %s`; running the sweep again reruns the run, "+
		"and launcher_options.sbatch: [\"--exclude=%s\"] keeps it off the node meanwhile",
		termsafe.Line(l.nodes[0]), termsafe.Line(l.nodes[0]), termsafe.Line(strings.Join(l.nodes, ",")))
}
