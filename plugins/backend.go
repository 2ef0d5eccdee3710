package plugins

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/plugins/protocol"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Defaults of Options.
const (
	DefaultStartTimeout = 30 * time.Second
	DefaultKillGrace    = 3 * time.Second
	DefaultCallTimeout  = 30 * time.Second
)

// Options tune how the host runs one plugin binary. The zero value works.
type Options struct {
	// Checksum is the SHA-256 the binary must have (from plugins.lock); go-plugin's
	// SecureConfig refuses to start a binary that does not match. Nil skips the check.
	Checksum []byte
	// Logs receives the plugin's logs outside runs (Describe, Validate), at warning
	// level and above. Default os.Stderr.
	Logs io.Writer
	// LogLevel is the least level of the plugin's hclog logs written into a run's
	// stderr.log. Default: info (FSDPBENCH_PLUGIN_LOG_LEVEL overrides it).
	LogLevel hclog.Level
	// StartTimeout bounds the plugin's start and handshake. Default DefaultStartTimeout.
	StartTimeout time.Duration
	// CallTimeout bounds a Describe or Validate call once the plugin has started: a
	// plugin that hangs there is killed and described as unavailable (Describe) or
	// left for Run to fail (Validate). Default DefaultCallTimeout.
	CallTimeout time.Duration
	// KillGrace is how long a cancelled plugin has to stop its processes before it
	// and they are killed. Default DefaultKillGrace.
	KillGrace time.Duration
	// Leftovers, when set, is told how many processes a cancelled call's plugin left
	// running past KillGrace (the host killed them): a backend that honours
	// cancellation leaves none. The conformance checks use it.
	Leftovers func(n int)
}

// Backend is an external backend: a plugin binary that serves backends.Backend over
// go-plugin. Every call starts the binary afresh in a process group of its own and
// kills it and everything it started when the call ends, so a plugin that crashes,
// hangs or leaks processes costs one call, never the sweep.
type Backend struct {
	name, path string
	opts       Options
	// refusal, when set, is why this plugin may not run (plugins.lock does not pin
	// it); every call fails with it.
	refusal string
	// lockPath is the lock file Checksum came from, for messages.
	lockPath string
}

// New returns the plugin binary at path as the backend called name.
func New(name, path string, opts Options) *Backend {
	if opts.Logs == nil {
		opts.Logs = os.Stderr
	}
	if opts.LogLevel == hclog.NoLevel {
		opts.LogLevel = hclog.Info
		if l := hclog.LevelFromString(os.Getenv("FSDPBENCH_PLUGIN_LOG_LEVEL")); l != hclog.NoLevel {
			opts.LogLevel = l
		}
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = DefaultKillGrace
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	return &Backend{name: name, path: path, opts: opts}
}

// Name returns the name the plugin was found under (fsdpbench-backend-<name>).
func (b *Backend) Name() string { return b.name }

// Path returns the plugin binary's path.
func (b *Backend) Path() string { return b.path }

// Describe asks the plugin; a plugin that cannot be started or asked is described
// as unavailable with the reason, so `fsdpbench backends` lists it anyway.
func (b *Backend) Describe(ctx context.Context) (backends.Description, error) {
	d := backends.Description{Name: b.name, Source: b.path, Summary: "external backend (plugin)"}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, b.opts.StartTimeout+b.opts.CallTimeout)
	defer cancel()
	s, err := b.start(ctx, b.callLogger(), nil, nil, nil)
	if err != nil {
		if parent.Err() != nil {
			return d, err
		}
		d.Reason = err.Error()
		return d, nil
	}
	callCtx, cancelCall := context.WithTimeout(ctx, b.opts.CallTimeout)
	defer cancelCall()
	got, err := s.proto.Describe(callCtx)
	if err != nil {
		if parent.Err() == nil && expired(callCtx) {
			s.logger.SetLevel(hclog.Off) // the reason is ours
			s.failed(ctx, "describe", err)
			err = b.hung("describe")
		} else {
			err = s.failed(ctx, "describe", err)
		}
	}
	s.logger.SetLevel(hclog.Off) // stopping is ours; any reason is in err
	s.stop(expired(callCtx))
	if err != nil {
		if parent.Err() != nil {
			return d, parent.Err()
		}
		d.Available = false
		d.Reason = err.Error()
		return d, nil
	}
	got.Name, got.Source = b.name, b.path
	return got, nil
}

// Validate returns the plugin's refusal of rc: a *backends.SpecError when the
// plugin may not run at all (plugins.lock does not pin it, or its binary changed
// since it was pinned) or when the plugin says the spec is wrong, a plain error for
// a configuration it cannot run. When the plugin cannot be asked (it crashed)
// Validate accepts rc and lets Run fail: the harness records a Validate error as
// "infeasible", a final verdict that a resume would never revisit, while a broken
// plugin is a failure.
func (b *Backend) Validate(ctx context.Context, rc sweeps.RunConfig) error {
	s, err := b.start(ctx, b.callLogger(), nil, nil, nil)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		if backends.IsSpecError(err) {
			// Unpinned, or changed since pinned: every run would be refused alike.
			if b.refusal != "" {
				return backends.SpecErrorf("plugin %s (%s) may not run: %w", b.name, b.path, err)
			}
			return err
		}
		return nil
	}
	callCtx, cancelCall := context.WithTimeout(ctx, b.opts.CallTimeout)
	defer cancelCall()
	refusal, err := s.proto.Validate(callCtx, rc)
	switch {
	case err != nil && ctx.Err() == nil && expired(callCtx):
		s.logger.SetLevel(hclog.Off)
		s.failed(ctx, "validate", err)
		s.logger.SetLevel(hclog.Warn)
		s.logger.Warn("validate did not answer; the run will fail if the plugin hangs there too", "error", b.hung("validate"))
	case err != nil && ctx.Err() == nil:
		s.logger.Warn("validate failed; the run will report why", "error", s.failed(ctx, "validate", err))
	}
	s.logger.SetLevel(hclog.Off) // stopping is ours
	s.stop(expired(callCtx))
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return nil
	}
	return refusal
}

// Run executes one repeat on a fresh plugin process. The plugin's hclog logs and
// its stdout and stderr go to env's writers (the run's log files); a plugin that
// dies fails the run with its exit status and last stderr lines.
func (b *Backend) Run(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
	stdout, stderr := &gate{w: env.Stdout}, &gate{w: env.Stderr}
	defer stdout.close()
	defer stderr.close()
	logger := hclog.New(&hclog.LoggerOptions{Name: "plugin." + b.name, Output: stderr, Level: b.opts.LogLevel,
		// Every run's plugin exits; only an exit with an error is news.
		Exclude: func(level hclog.Level, msg string, _ ...any) bool {
			return level == hclog.Info && msg == "plugin process exited"
		}})
	s, err := b.start(ctx, logger, stdout, stderr, rc.Env)
	if err != nil {
		return results.Result{}, err
	}
	env.Stdout, env.Stderr = stdout, stderr
	res, err := s.proto.Run(ctx, rc, env, emit)
	if err != nil && ctx.Err() == nil && !s.answered(err) {
		err = s.failed(ctx, "run", err)
	}
	s.stop(ctx.Err() != nil)
	if ctx.Err() != nil && err != nil {
		// The harness tells a timeout from an interruption by its own contexts.
		return res, fmt.Errorf("plugin %s: %w", b.name, ctx.Err())
	}
	if err == nil {
		if cerr := backends.CheckResult(rc, res); cerr != nil {
			// Nothing of a result that lies is kept: its figures would reach the
			// tables (peaks are taken from every repeat, failed ones included).
			return results.Result{Status: results.StatusFailed, WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode,
				Started: res.Started, Finished: res.Finished, Env: res.Env,
				Error: fmt.Sprintf("plugin %s (%s) returned a result that cannot be right: %v", b.name, b.path, cerr)}, nil
		}
	}
	return res, err
}

// expired reports whether ctx has ended or its deadline has passed: gRPC's own
// timer can fail a call a moment before the context's fires.
func expired(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// hung says that the plugin did not answer call within CallTimeout.
func (b *Backend) hung(call string) error {
	return fmt.Errorf("plugin %s (%s) did not answer %s within %v, so it was killed; fix the plugin or remove it from the plugin path",
		b.name, b.path, call, b.opts.CallTimeout)
}

// callLogger is the logger of a Describe or Validate call.
func (b *Backend) callLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "plugin." + b.name, Output: b.opts.Logs, Level: hclog.Warn})
}

// session is one started plugin process.
type session struct {
	b      *Backend
	logger hclog.Logger
	client *plugin.Client
	proto  *protocol.Client
	cmd    *exec.Cmd
	stderr *tail
	// cancelProc kills the process through exec.CommandContext, also while
	// go-plugin is still starting it.
	cancelProc context.CancelFunc
	// release frees the thread the plugin was forked from (contract.Tie).
	release func()
	// plugin is the plugin's pid; cmd.Process is its reaper.
	plugin int
}

// reaperGrace bounds the reaper's wait between SIGTERM and SIGKILL to what a
// plugin left, below go-plugin's 2 s wait for a plugin to exit (past it, go-plugin
// SIGKILLs the reaper, and anything still below it would escape to init).
const reaperGrace = time.Second

// others lists the live processes below the reaper but the plugin itself: what
// the plugin started.
func (s *session) others() []int {
	var out []int
	for _, p := range contract.Descendants(s.cmd.Process.Pid) {
		if p != s.plugin {
			out = append(out, p)
		}
	}
	return out
}

// start starts the plugin and completes the handshake, or says why it could not.
// runEnv is the run's variables from the spec (nil outside a run): the plugin
// process, and so whatever it starts, gets them on top of this one's environment.
func (b *Backend) start(ctx context.Context, logger hclog.Logger, stdout, stderr io.Writer, runEnv map[string]string) (*session, error) {
	if b.refusal != "" {
		return nil, backends.SpecErr(errors.New(b.refusal))
	}
	if b.opts.Checksum != nil {
		// Checked here, not by go-plugin's SecureConfig: the process go-plugin
		// starts is the reaper (this executable), which would be what it hashes.
		sum, err := FileSHA256(b.path)
		if err != nil {
			return nil, b.startError(err, "")
		}
		if sum != hex.EncodeToString(b.opts.Checksum) {
			return nil, b.startError(plugin.ErrChecksumsDoNotMatch, "")
		}
	}
	procCtx, cancelProc := context.WithCancel(context.Background())
	cmd := exec.CommandContext(procCtx, b.path)
	if len(runEnv) > 0 {
		cmd.Env = contract.WithEnv(os.Environ(), runEnv)
	}
	// The plugin runs under a run reaper, as torchrun's command does
	// (contract.RunGroup): a child subreaper that outlives the plugin until
	// everything below it is gone, so a daemon the plugin's run leaves (setsid,
	// double fork) cannot escape to init when the plugin exits, as one did in 2 of
	// 8 sweeps under the SDK's own subreaper. Its grace is short: what the plugin
	// started was killed already when the plugin is asked to exit (stop).
	contract.ReaperCmd(cmd, min(b.opts.KillGrace, reaperGrace))
	// SIGTERM when fsdpbench dies, even by SIGKILL: the reaper then ends the
	// plugin and everything below it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error {
		contract.KillTree(cmd.Process.Pid)
		return nil
	}
	s := &session{b: b, logger: logger, cmd: cmd, stderr: &tail{max: 1 << 10}, cancelProc: cancelProc}
	s.client = plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  protocol.Handshake,
		VersionedPlugins: protocol.Plugins(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           logger,
		Stderr:           s.stderr,
		SyncStdout:       stdout,
		SyncStderr:       stderr,
		StartTimeout:     b.opts.StartTimeout,
		GRPCDialOptions:  []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(protocol.MaxRunMessageBytes))},
	})
	ch := make(chan started, 1)
	go func() {
		// go-plugin forks the plugin in Client: on a thread that outlives it.
		var rpc plugin.ClientProtocol
		release, err := contract.Tie(func() (err error) {
			rpc, err = s.client.Client()
			return err
		})
		if err != nil {
			ch <- started{err: err, release: release}
			return
		}
		ch <- s.dispense(rpc, release)
	}()
	select {
	case <-ctx.Done():
		cancelProc()
		go func() {
			st := <-ch
			s.client.Kill()
			st.release()
		}()
		return nil, fmt.Errorf("plugin %s: %w while starting it", b.name, ctx.Err())
	case st := <-ch:
		if st.err != nil {
			// The reason is in the error; go-plugin's complaints about killing the
			// process that failed would only repeat it.
			logger.SetLevel(hclog.Off)
			cancelProc()
			s.client.Kill()
			st.release()
			return nil, b.startError(st.err, s.stderr.String())
		}
		s.proto, s.release = st.proto, st.release
		// The plugin is the reaper's first child; nothing else runs below the
		// reaper before the first call.
		if d := contract.Descendants(cmd.Process.Pid); len(d) > 0 {
			s.plugin = d[0]
		}
		return s, nil
	}
}

// started is how a plugin's start ended.
type started struct {
	proto   *protocol.Client
	err     error
	release func() // of the thread the plugin was forked from
}

// dispense gets the backend from a started plugin.
func (s *session) dispense(rpc plugin.ClientProtocol, release func()) started {
	raw, err := rpc.Dispense(protocol.PluginName)
	if err != nil {
		return started{err: err, release: release}
	}
	pc, ok := raw.(*protocol.Client)
	if !ok {
		return started{err: fmt.Errorf("dispensed %T, not a backend", raw), release: release}
	}
	return started{proto: pc, release: release}
}

// startError says why the plugin did not start, and what to do.
func (b *Backend) startError(err error, stderr string) error {
	where := fmt.Sprintf("plugin %s (%s)", b.name, b.path)
	if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
		have := "unreadable"
		if sum, herr := FileSHA256(b.path); herr == nil {
			have = sum
		}
		pinned := "the expected checksum is"
		if b.lockPath != "" {
			pinned = b.lockPath + " pins"
		}
		return backends.SpecErrorf("%s: refused: its sha256 is %s but %s %s; if you rebuilt or replaced it on purpose, run `fsdpbench plugins lock`",
			where, have, pinned, hex.EncodeToString(b.opts.Checksum))
	}
	first, more, _ := strings.Cut(err.Error(), "\n")
	msg := fmt.Sprintf("%s: could not start: %s", where, first)
	if strings.HasPrefix(first, "Unrecognized remote plugin message") {
		// The rest is go-plugin's list of causes (architecture, libraries, mode).
		msg += " (a plugin must print nothing on stdout before its handshake; check it is an fsdpbench plugin built for this machine)"
	} else if more != "" {
		msg += " " + strings.ReplaceAll(strings.TrimSpace(more), "\n", " ")
	}
	if stderr != "" {
		msg += "; its stderr ends with: " + stderr
	}
	return fmt.Errorf("%s (this fsdpbench speaks plugin protocol version %d; a plugin built with plugins/sdk speaks the version of the fsdpbench module it was built against)",
		msg, protocol.Version)
}

// answered reports whether err is the backend's own error, delivered in Done.
func (s *session) answered(err error) bool {
	var be *protocol.BackendError
	return errors.As(err, &be)
}

// failed explains a call that broke off: the plugin died (exit status and last
// stderr lines) or sent something unreadable.
func (s *session) failed(ctx context.Context, call string, err error) error {
	// Whatever the plugin left running goes now, the plugin too; its exit status
	// is known after. The reaper is left to exit as the plugin did (with its code,
	// or of its signal), which go-plugin's Kill waits for.
	left := s.others()
	if s.plugin > 0 { // never 0: kill(0) would signal fsdpbench's own group
		left = append(left, s.plugin)
	}
	contract.SignalAll(left, syscall.SIGKILL)
	s.client.Kill()
	where := fmt.Sprintf("plugin %s (%s)", s.b.name, s.b.path)
	e := s.stderr.String()
	if e != "" {
		e = "; its stderr ends with: " + e
	}
	// A SIGKILL is ours (killTree above): the plugin was alive but broke the protocol.
	if st := s.cmd.ProcessState; st != nil && !killedBySIGKILL(st) {
		return fmt.Errorf("%s died during %s (%s)%s", where, call, st, e)
	}
	return fmt.Errorf("%s: %s failed, so the plugin was killed: %w%s", where, call, err, e)
}

func killedBySIGKILL(st *os.ProcessState) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// stop ends the session. A cancelled call first gives the plugin KillGrace to stop
// the processes it started (its backend sees the cancelled stream); then the
// plugin, its group and every descendant are killed whatever they are doing.
func (s *session) stop(cancelled bool) {
	pid := s.cmd.Process.Pid // the reaper
	if cancelled {
		deadline := time.Now().Add(s.b.opts.KillGrace)
		left := s.others()
		for len(left) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			left = s.others()
		}
		if s.b.opts.Leftovers != nil {
			s.b.opts.Leftovers(len(left))
		}
		// The plugin too: it did not stop its processes, or hangs. The reaper
		// stays, and ends whatever forks meanwhile.
		if s.plugin > 0 { // never 0: kill(0) would signal fsdpbench's own group
			left = append(left, s.plugin)
		}
		contract.SignalAll(left, syscall.SIGKILL)
	}
	// The call is over, so whatever the plugin started goes now; the reaper ends
	// anything started meanwhile once the plugin exits, and exits itself only when
	// nothing is left below it, which is what go-plugin's Kill waits for.
	contract.SignalAll(s.others(), syscall.SIGKILL)
	// go-plugin's Kill asks the plugin to exit and waits up to 2 s for it; a plugin
	// that does not answer is killed below meanwhile, which ends that wait.
	defer s.release()
	killed := make(chan struct{})
	go func() {
		s.client.Kill()
		close(killed)
	}()
	select {
	case <-killed:
	case <-time.After(s.b.opts.KillGrace):
	}
	contract.KillTree(pid)
	<-killed
	s.cancelProc()
}
