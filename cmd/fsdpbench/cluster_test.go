package main

// Multi-node runs on the two-node cluster of .ci/cluster: each node a network
// namespace with its own address, host name and slurmd, so rendezvous across
// hosts, ranks placed per node and traffic between nodes are real. The tests here
// do not run in parallel with each other: the fault tests take a node down.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clusterNodes are the namespace nodes .ci/cluster start --nodes 2 brings up.
var clusterNodes = []string{"fsdp-node1", "fsdp-node2"}

// needCluster skips without the two-node cluster, and fails instead in CI, where
// .ci/with-slurm brings it up and FSDPBENCH_REQUIRE_SLURM=1.
func needCluster(t *testing.T) {
	t.Helper()
	needSlurm(t)
	out, err := exec.Command("sinfo", "-h", "-N", "-p", "cluster", "-o", "%N %T").CombinedOutput()
	idle := 0
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "fsdp-node") && (f[1] == "idle" || f[1] == "mixed") {
			idle++
		}
	}
	if err != nil || idle < 2 {
		msg := fmt.Sprintf("no two-node cluster here (partition cluster: %q, %v); .ci/cluster start --nodes 2 brings one up", strings.TrimSpace(string(out)), err)
		if os.Getenv("FSDPBENCH_REQUIRE_SLURM") == "1" {
			t.Fatal("FSDPBENCH_REQUIRE_SLURM=1 but " + msg)
		}
		t.Skip(msg)
	}
}

// clusterCmd runs .ci/cluster with args.
func clusterCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot, ".ci", "cluster"), args...).CombinedOutput()
	require.NoError(t, err, ".ci/cluster %v: %s", args, out)
}

// nodeProcesses lists the processes running inside a node's namespace but Slurm's
// own daemons: slurmd, and a job step's slurmstepd, which after a link failure may
// outlive its job until it has told the controller (the run's processes must not).
func nodeProcesses(t *testing.T, node string) []string {
	t.Helper()
	ns := "fsdpbench-n" + strings.TrimPrefix(node, "fsdp-node")
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	require.NoError(t, err)
	var left []string
	for _, pid := range strings.Fields(string(out)) {
		comm, err := os.ReadFile("/proc/" + pid + "/comm")
		if err != nil {
			continue // gone meanwhile
		}
		if c := strings.TrimSpace(string(comm)); c != "slurmd" && c != "slurmstepd" {
			left = append(left, pid+" "+c)
		}
	}
	return left
}

// noProcessesLeft waits (a rank that lost its peers takes up to its collective
// timeout to notice) until no node runs anything of the run.
func noProcessesLeft(t *testing.T) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		left = nil
		for _, n := range clusterNodes {
			for _, p := range nodeProcesses(t, n) {
				left = append(left, n+": "+p)
			}
		}
		if len(left) == 0 {
			return
		}
	}
	t.Errorf("still running on the nodes 30 s after the run ended: %v", left)
}

// fileText reads a file when asked (its String method), for messages.
type fileText string

func (f fileText) String() string {
	b, _ := os.ReadFile(string(f))
	return string(b)
}

// runLogTails is the end of every run's stderr.log under a sweep directory, so a
// failure in CI says why the runs failed and not only that they did.
func runLogTails(sweepDir string) string {
	logs, _ := filepath.Glob(filepath.Join(sweepDir, "runs", "*", "stderr.log"))
	var b strings.Builder
	for _, l := range logs {
		text, _ := os.ReadFile(l)
		if len(text) > 3000 {
			text = text[len(text)-3000:]
		}
		fmt.Fprintf(&b, "--- %s (last 3000 bytes)\n%s\n", l, text)
	}
	return b.String()
}

type clusterRun struct {
	Status  string `json:"status"`
	Error   string `json:"error"`
	Nodes   int    `json:"nodes"`
	PerRank []struct {
		Rank int    `json:"rank"`
		Host string `json:"host"`
	} `json:"per_rank"`
	LossFirst *float64 `json:"loss_first"`
	LossLast  *float64 `json:"loss_last"`
	Comm      *struct {
		InterNode *int64 `json:"inter_node"`
	} `json:"comm_bytes_per_step"`
	Steps []struct {
		Loss *float64 `json:"loss"`
	} `json:"steps"`
}

func clusterRuns(t *testing.T, sweepDir string) map[string]clusterRun {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(sweepDir, "runs", "*", "metrics.json"))
	require.NoError(t, err)
	runs := map[string]clusterRun{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var r clusterRun
		require.NoError(t, json.Unmarshal(b, &r), f)
		runs[filepath.Base(filepath.Dir(f))] = r
	}
	return runs
}

// TestTwoNodeRunsMatchOneNode runs both engines through Slurm on one node of the
// cluster (4 ranks) and across its two nodes (2 + 2 ranks) at the same global
// batch: every run ends ok, ranks 0-1 ran on the first node and 2-3 on the second,
// gotrain's losses equal the one-node run's within 1e-5 relative (full_shard and
// hybrid_shard across the nodes), torchrun's DDP losses are equal, and only the
// two-node runs sent bytes across nodes.
func TestTwoNodeRunsMatchOneNode(t *testing.T) {
	needCluster(t)
	dir := t.TempDir()
	cancelJobsUnder(t, dir)
	specs := map[string]string{
		"gotrain": `name: two-gotrain
backend: gotrain
launcher: slurm
launcher_options: {poll_interval: 200ms, partition: cluster}
hardware: cpu
model: tiny
seq_len: 32
steps: 4
warmup_steps: 1
timeout: 3m
seed: 7
base: {mixed_precision: fp32, batch_per_device: 1, global_batch: 4}
grid:
  world_size: [4]
  nodes: [1, 2]
  sharding: [full_shard, hybrid_shard]
exclude: [{sharding: hybrid_shard, nodes: 1}]
`,
		"torchrun": `name: two-torchrun
backend: torchrun
launcher: slurm
launcher_options: {poll_interval: 200ms, partition: cluster}
hardware: cpu
model: tiny
seq_len: 32
steps: 3
warmup_steps: 1
timeout: 4m
seed: 7
base: {sharding: ddp, mixed_precision: fp32, batch_per_device: 1, global_batch: 4}
grid:
  world_size: [4]
  nodes: [1, 2]
`,
	}
	for _, engine := range []string{"gotrain", "torchrun"} {
		t.Run(engine, func(t *testing.T) {
			if engine == "torchrun" {
				needTorch(t)
			}
			spec := filepath.Join(dir, engine+".yaml")
			require.NoError(t, os.WriteFile(spec, []byte(specs[engine]), 0o644))
			res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
			require.Equal(t, 0, res.code, "%s\n%s\n%s", res.stdout, res.stderr,
				runLogTails(filepath.Join(dir, "fsdpbench-results", "two-"+engine)))
			runs := clusterRuns(t, filepath.Join(dir, "fsdpbench-results", "two-"+engine))
			require.NotEmpty(t, runs)
			var ref *clusterRun
			for _, r := range runs {
				if r.Nodes <= 1 {
					ref = &r
				}
			}
			require.NotNil(t, ref, "no one-node run")
			for id, r := range runs {
				require.Equal(t, "ok", r.Status, "%s: %s", id, r.Error)
				require.Len(t, r.PerRank, 4, id)
				for _, pr := range r.PerRank {
					want := clusterNodes[0]
					if r.Nodes == 2 && pr.Rank >= 2 {
						want = clusterNodes[1]
					}
					assert.Equal(t, want, pr.Host, "%s: the node of rank %d", id, pr.Rank)
				}
				require.Len(t, r.Steps, len(ref.Steps), id)
				for i, st := range r.Steps {
					require.NotNil(t, st.Loss, "%s step %d", id, i)
					if engine == "gotrain" {
						assert.InEpsilon(t, *ref.Steps[i].Loss, *st.Loss, 1e-5, "%s step %d", id, i)
					} else {
						assert.Equal(t, *ref.Steps[i].Loss, *st.Loss, "%s step %d", id, i)
					}
				}
				if engine == "gotrain" {
					require.NotNil(t, r.Comm, id)
					require.NotNil(t, r.Comm.InterNode, id)
					if r.Nodes == 2 {
						assert.Positive(t, *r.Comm.InterNode, "%s: bytes across nodes", id)
					} else {
						assert.Zero(t, *r.Comm.InterNode, "%s: bytes across nodes", id)
					}
				}
			}
			noProcessesLeft(t)
		})
	}
}

// TestTwoNodeFaults breaks a two-node gotrain run in the three ways a cluster
// does — one node's worker SIGKILLed, the link between the nodes taken down, a
// whole node crashing (its slurmd, job step and workers killed at once) — and
// checks each ends the run failed, in bounded time, with an error naming the node
// and the rank, and with nothing left running on either node.
func TestTwoNodeFaults(t *testing.T) {
	needCluster(t)
	t.Cleanup(func() {
		for _, n := range clusterNodes {
			_ = exec.Command(filepath.Join(repoRoot, ".ci", "cluster"), "revive", n).Run()
		}
	})
	faults := []struct {
		name   string
		break_ func(t *testing.T)
		want   []string
	}{
		{"worker killed", func(t *testing.T) {
			for _, p := range nodeProcesses(t, "fsdp-node2") {
				if pid, comm, _ := strings.Cut(p, " "); comm == "fsdpbench" {
					n, err := strconv.Atoi(pid)
					require.NoError(t, err)
					require.NoError(t, syscall.Kill(n, syscall.SIGKILL))
					return
				}
			}
			t.Fatal("no worker runs on fsdp-node2")
		}, []string{"on fsdp-node2", "closed its connection"}},
		{"link down", func(t *testing.T) { clusterCmd(t, "link", "down", "fsdp-node2") },
			[]string{"on fsdp-node2", "node fsdp-node2 is down", "NODE_FAIL"}},
		{"node crash", func(t *testing.T) { clusterCmd(t, "crash", "fsdp-node2") },
			[]string{"on fsdp-node2", "node fsdp-node2 is down", "NODE_FAIL"}},
	}
	for i, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			dir := t.TempDir()
			cancelJobsUnder(t, dir)
			spec := filepath.Join(dir, "fault.yaml")
			require.NoError(t, os.WriteFile(spec, []byte(fmt.Sprintf(`name: fault
backend: gotrain
launcher: slurm
launcher_options: {poll_interval: 200ms, partition: cluster}
hardware: cpu
model: tiny
seq_len: 32
steps: 1000
warmup_steps: 1
timeout: 5m
seed: %d
base: {mixed_precision: fp32, batch_per_device: 1, sharding: full_shard}
backend_options: {step_delay: 100ms, collective_timeout: 5s}
grid: {world_size: [4], nodes: [2]}
`, 20+i)), 0o644))
			cmd := command(dir, "sweep", spec, "--progress", "plain")
			// The sweep's output goes to a file: read while the sweep writes, a
			// strings.Builder would be a data race.
			outFile, err := os.Create(filepath.Join(dir, "sweep.out"))
			require.NoError(t, err)
			defer outFile.Close()
			cmd.Stdout, cmd.Stderr = outFile, outFile
			out := fileText(filepath.Join(dir, "sweep.out"))
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			sweepDir := filepath.Join(dir, "fsdpbench-results", "fault")
			for deadline := time.Now().Add(90 * time.Second); !jobRunning(sweepDir); time.Sleep(200 * time.Millisecond) {
				require.True(t, time.Now().Before(deadline), "the run never started: %s", out.String())
			}
			time.Sleep(time.Second) // a few steps in
			start := time.Now()
			f.break_(t)
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				_ = cmd.Process.Kill()
				t.Fatalf("the sweep had not ended 2 minutes after the fault: %s", out.String())
			}
			t.Logf("%s: the run ended %.1f s after the fault", f.name, time.Since(start).Seconds())
			clusterCmd(t, "revive", "fsdp-node2")
			runs := clusterRuns(t, sweepDir)
			require.Len(t, runs, 1, out.String())
			for id, r := range runs {
				assert.Equal(t, "failed", r.Status, id)
				for _, w := range f.want {
					assert.Contains(t, r.Error, w, id)
				}
				assert.Regexp(t, `rank [0-9]+ on fsdp-node2`, r.Error, id)
			}
			noProcessesLeft(t)
		})
	}
}

// TestTwoNodeCrashedNodeNotYetDown: a node that crashed a moment ago is still idle
// to Slurm (it is marked down only after SlurmdTimeout), so a two-node job is
// started on it and srun cannot launch its tasks there. The run failed as "rank 0
// exited with code 0 (Slurm job 3 failed with exit code 233)", srun's "Task launch
// for StepId=3.0 failed on node fsdp-node2: Communication connection failure" in
// stderr.log alone; the run's error now names the node and srun's launch failure.
func TestTwoNodeCrashedNodeNotYetDown(t *testing.T) {
	needCluster(t)
	t.Cleanup(func() { _ = exec.Command(filepath.Join(repoRoot, ".ci", "cluster"), "revive", "fsdp-node2").Run() })
	dir := t.TempDir()
	cancelJobsUnder(t, dir)
	spec := filepath.Join(dir, "crashed.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(`name: crashed
backend: gotrain
launcher: slurm
launcher_options: {poll_interval: 200ms, partition: cluster}
hardware: cpu
model: tiny
seq_len: 32
steps: 4
warmup_steps: 1
timeout: 3m
seed: 31
base: {mixed_precision: fp32, batch_per_device: 1, global_batch: 4, sharding: hybrid_shard}
grid: {world_size: [4], nodes: [2]}
`), 0o644))
	clusterCmd(t, "crash", "fsdp-node2")
	start := time.Now()
	res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
	t.Logf("the sweep ended %.1f s after the crash", time.Since(start).Seconds())
	clusterCmd(t, "revive", "fsdp-node2")
	sweepDir := filepath.Join(dir, "fsdpbench-results", "crashed")
	require.Equal(t, ExitFailed, res.code, "%s\n%s\n%s", res.stdout, res.stderr, runLogTails(sweepDir))
	runs := clusterRuns(t, sweepDir)
	require.Len(t, runs, 1, res.stderr)
	for id, r := range runs {
		assert.Equal(t, "failed", r.Status, id)
		assert.Regexp(t, `^Slurm job [0-9]+ failed: srun could not start the run's tasks on node fsdp-node2 `+
			`\(Task launch for StepId=[0-9]+\.0 failed on node fsdp-node2: Communication connection failure\); `+
			`the node's slurmd does not answer`, r.Error, id)
		assert.NotContains(t, r.Error, "exited with code 0", id)
		// The sweep's own line for the run says it too, not only metrics.json.
		assert.Contains(t, res.stdout+res.stderr, "srun could not start the run's tasks on node fsdp-node2", id)
	}
	noProcessesLeft(t)
}
