//go:build cgo

package nccl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm/nccl/ncclfake"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
)

// workerEnv makes the test binary one rank of a multi-process test.
const workerEnv = "GOTRAIN_NCCL_TEST_WORKER"

// faultTimeout is the workers' collective timeout: short, so the hang tests
// end quickly.
const faultTimeout = 1500 * time.Millisecond

// report is what a worker prints when its loop of collectives fails.
type report struct {
	Rank   int    `json:"rank"`
	Failed int    `json:"failed"`
	Error  string `json:"error"`
}

// worker is one rank: it all-reduces over the NCCL world and, every few calls,
// over a split group, until a collective fails, then prints its report.
func worker(mode string) int {
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lib, err := Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	c, err := Dial(ctx, info, lib, Options{Timeout: faultTimeout, ConnectTimeout: 20 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	if mode != "loop" {
		fmt.Fprintf(os.Stderr, "unknown worker mode %q\n", mode)
		return 1
	}
	sub, err := c.Split(ctx, info.Rank%2, info.Rank)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer sub.Close()
	buf := rankData(info.Rank, 4096)
	for i := 0; i < 1000; i++ {
		err := c.AllReduce(ctx, buf, comm.Average)
		if err == nil && i%3 == 0 {
			err = sub.AllReduce(ctx, buf, comm.Sum)
		}
		if err != nil {
			rep := report{Rank: info.Rank, Failed: -2, Error: err.Error()}
			var ne *Error
			if errors.As(err, &ne) {
				rep.Failed = ne.Rank
			}
			_ = json.NewEncoder(os.Stdout).Encode(rep)
			return 3
		}
	}
	return 0
}

// TestFaultsNameTheRank starts ranks as processes over the fake and injects a
// fault on one: every surviving rank's collective fails, in bounded time,
// naming that rank (a failed run, not a hang).
func TestFaultsNameTheRank(t *testing.T) {
	tests := []struct {
		name    string
		fault   string
		size    int
		culprit int
		reason  string
		stopped bool
	}{
		{"async error on rank 1", "async:1:7", 3, 1, "injected asynchronous error", false},
		{"async error in a sub-communicator", "async:2:6", 4, 2, "injected asynchronous error", false},
		{"hung rank 2", "hang:2:5", 3, 2, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			procs := startWorkers(t, tt.size, ncclfake.EnvFault+"="+tt.fault)
			deadline := time.After(60 * time.Second)
			for r, p := range procs {
				if tt.stopped && r == tt.culprit {
					continue
				}
				select {
				case <-p.done:
				case <-deadline:
					t.Fatalf("rank %d did not end within 60s: the fault became a hang\nstderr: %s", r, p.stderr)
				}
				require.Equal(t, 3, p.cmd.ProcessState.ExitCode(), "rank %d: stderr %s\nstdout %s", r, p.stderr, p.stdout)
				var rep report
				require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &rep), "rank %d: %s", r, p.stdout)
				assert.Equal(t, tt.culprit, rep.Failed, "rank %d names the rank: %s", r, rep.Error)
				assert.Contains(t, rep.Error, fmt.Sprintf("rank %d", tt.culprit))
				if r == tt.culprit {
					assert.Contains(t, rep.Error, tt.reason)
				}
			}
			elapsed := time.Since(start)
			t.Logf("every surviving rank failed after %v", elapsed.Round(time.Millisecond))
			if tt.stopped {
				p := procs[tt.culprit]
				ws, err := waitStopped(p.cmd.Process.Pid)
				require.NoError(t, err)
				assert.True(t, ws, "the hung rank is stopped, not exited")
			}
		})
	}
}

// waitStopped reports whether pid is in the stopped state (T in /proc).
func waitStopped(pid int) (bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false, err
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+1:])
	return len(f) > 0 && f[0] == "T", nil
}

// workerProc is one started rank.
type workerProc struct {
	cmd            *exec.Cmd
	stdout, stderr *strings.Builder
	done           chan struct{}
}

// startWorkers starts size ranks of the test binary with torchrun's variables.
func startWorkers(t *testing.T, size int, env ...string) []*workerProc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	procs := make([]*workerProc, size)
	for r := range size {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), env...), workerEnv+"=loop",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(size))
		p := &workerProc{cmd: cmd, stdout: &strings.Builder{}, stderr: &strings.Builder{}, done: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
		require.NoError(t, cmd.Start())
		go func() { _ = cmd.Wait(); close(p.done) }()
		procs[r] = p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGKILL) // a stopped rank too
			<-p.done
		}
	})
	return procs
}
