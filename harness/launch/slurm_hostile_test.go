package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestSBatchItemsAreOneLineEach: a line break in a launcher_options.sbatch item
// used to end the #SBATCH line, the rest of the item becoming a command of the job
// script ("--comment=x\ntouch FILE" ran touch FILE) and every later item being
// ignored by sbatch. Line breaks, other control characters and items that are not
// options are spec errors naming the key and the item.
func TestSBatchItemsAreOneLineEach(t *testing.T) {
	for _, tt := range []struct {
		items []any
		want  string
	}{
		{[]any{"--comment=x\ntouch FILE", "--exclusive"}, `launcher_options.sbatch: item 0 "--comment=x\ntouch FILE" holds a line break: each item is one #SBATCH line`},
		{[]any{"--exclusive", "--comment=x\rtouch FILE"}, `item 1 "--comment=x\rtouch FILE" holds a line break`},
		{[]any{"--comment=x\u2028touch FILE"}, "holds a line break"},
		{[]any{"--comment=x\vy"}, "holds a line break"},
		{[]any{"--comment=\x1b[2Jx"}, `item 0 "--comment=\x1b[2Jx" holds a control character (U+001B)`},
		{[]any{"--comment=a\x00b"}, "holds a control character (U+0000)"},
		{[]any{"--comment=a\tb"}, "holds a control character (U+0009)"},
		{[]any{"touch FILE"}, `item 0 "touch FILE" is not an sbatch option`},
		{[]any{""}, `item 0 "" is not an sbatch option`},
	} {
		_, err := ParseSlurmOptions(map[string]any{"sbatch": tt.items})
		require.Error(t, err, "%q", tt.items)
		assert.Contains(t, err.Error(), tt.want, "%q", tt.items)
		assert.Contains(t, err.Error(), "launcher_options.sbatch: ", "the key is named")
		assert.True(t, backends.IsSpecError(err), "%v", err)
	}
	// The one-string form is checked the same.
	_, err := ParseSlurmOptions(map[string]any{"sbatch": "--comment=x\ntouch FILE"})
	assert.ErrorContains(t, err, "holds a line break")

	// Every word option refuses control characters too, not only line breaks.
	for _, k := range []string{"partition", "account", "qos", "constraint", "mem", "time", "gpu_request"} {
		_, err := ParseSlurmOptions(map[string]any{k: "gpu\x1b[0m"})
		assert.ErrorContains(t, err, "launcher_options."+k+": ", k)
		assert.ErrorContains(t, err, "holds a control character (U+001B)", k)
	}

	// Good items are written one #SBATCH line each, after the run's own, and the
	// script's first command comes after all of them.
	rc := twoNodeRun(t, gotrain.Name, "cpu", "tiny", sweeps.FP32, 2, nil)
	rc.LauncherOptions["sbatch"] = []any{"--comment=x touch FILE", "--exclusive"}
	text := script(t, gotrain.New(), rc, nil)
	assert.Contains(t, text, "#SBATCH --comment=x touch FILE\n#SBATCH --exclusive\nset -eo pipefail\n")
	for _, line := range strings.Split(text, "\n") {
		assert.NotEqual(t, "touch FILE", strings.TrimSpace(line))
	}
}

// TestMemIsSlurmsSyntax: launcher_options.mem is checked as sbatch's --mem when
// the spec is read — a whole number with an optional unit K, M, G or T, 0 for
// all of a node's memory — instead of failing every run at submit time
// ("sbatch: error: Invalid --mem specification").
func TestMemIsSlurmsSyntax(t *testing.T) {
	for _, good := range []any{"0", "4096", "64G", "64g", "10k", "1T", "512000M", "64GB", 4096, 0, uint64(2048), "1048576T", ""} {
		o, err := ParseSlurmOptions(map[string]any{"mem": good})
		assert.NoError(t, err, "%v", good)
		if s, ok := good.(string); ok {
			assert.Equal(t, s, o.Mem)
		}
	}
	for _, tt := range []struct {
		mem  any
		want string
	}{
		{"abc", `launcher_options.mem: "abc" is not a Slurm memory size: give a whole number of megabytes, or one with a unit K, M, G or T ("64G", "512000M"); 0 asks for all the memory of each node`},
		{-5, `"-5" is not a Slurm memory size`},
		{"1.5G", `"1.5G" is not a Slurm memory size`},
		{"64X", "is not a Slurm memory size"},
		{"64 G", "is not a Slurm memory size"},
		{"G", "is not a Slurm memory size"},
		{"64GiB", "is not a Slurm memory size"},
		{"1048577T", `"1048577T" is more memory than any node has (at most 1 EiB, 1048576T)`},
		{"99999999999999999999999", "is more memory than any node has"},
		{2.5, "launcher_options.mem: want a string"},
		{"64G\nx", "holds a line break"},
	} {
		_, err := ParseSlurmOptions(map[string]any{"mem": tt.mem})
		assert.ErrorContains(t, err, tt.want, "%v", tt.mem)
		assert.True(t, backends.IsSpecError(err), "%v", err)
	}
}

// crashedNodeErr is the job's stderr (slurm-<id>.err) as Slurm 22.05 wrote it when
// fsdp-node2 had crashed (.ci/cluster crash fsdp-node2) and was not yet marked
// down, and a two-node job was started on it at once.
const crashedNodeErr = `srun: error: Task launch for StepId=3.0 failed on node fsdp-node2: Communication connection failure
srun: error: Application launch failed: Communication connection failure
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
0: slurmstepd-fsdp-node1: error: *** STEP 3.0 ON fsdp-node1 CANCELLED AT 2026-11-28T20:27:35 ***
srun: error: fsdp-node1: tasks 0-1: Killed
srun: launch/slurm: _step_signal: Terminating StepId=3.0
`

// TestSlurmLaunchFailureNamesTheNode: a job whose tasks srun could not start on a
// node (crashed, not yet marked down) ended FAILED with srun's exit code, and the
// run said only "rank 0 exited with code 0 (Slurm job 3 failed with exit code
// 233)"; the node and srun's words were in stderr.log alone. The run's error now
// names the node and the launch failure, from the real stderr text.
func TestSlurmLaunchFailureNamesTheNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slurm-3.err")
	require.NoError(t, os.WriteFile(path, []byte(crashedNodeErr), 0o644))
	var launch launchFailures
	job := &shellJob{}
	tl := &tail{path: path, stream: "stderr"}
	tl.read(true, func(stream string, task int, line string) {
		launch.see(stream, task, line)
		job.Line(stream, task, line)
	})
	require.True(t, launch.failed())
	assert.Equal(t, []string{"fsdp-node2"}, launch.nodes)

	rc, _ := shellRun(t, time.Minute)
	res := NewSlurm().finish(rc, "3", jobInfo{State: "FAILED", ExitCode: 233, NodeList: "fsdp-node[1-2]"}, job, &launch, func(string, ...any) {})
	assert.Equal(t, results.StatusFailed, res.Status)
	assert.Contains(t, res.Error, "Slurm job 3 failed: srun could not start the run's tasks on node fsdp-node2 "+
		"(Task launch for StepId=3.0 failed on node fsdp-node2: Communication connection failure)")
	assert.Contains(t, res.Error, "the node's slurmd does not answer: the node may have crashed")
	assert.Contains(t, res.Error, "`sinfo -N -n fsdp-node2`")
	assert.Contains(t, res.Error, `launcher_options.sbatch: ["--exclude=fsdp-node2"]`)
	assert.NotContains(t, res.Error, "exited with code 0", "the ranks srun killed are not the cause")
	assert.NotContains(t, res.Error, "\n", "one line: the status the sweep prints")

	// A job that failed for another reason keeps the backend's account of it.
	var none launchFailures
	res = NewSlurm().finish(rc, "4", jobInfo{State: "FAILED", ExitCode: 1}, &shellJob{}, &none, func(string, ...any) {})
	assert.Equal(t, "Slurm job 4 failed with exit code 1", res.Error)
}

// TestLaunchFailuresParse: srun's line in its old and new step forms, one per
// node, a rank's line that says the same is not srun's, a refusal that is not a
// dead node gets no crash hint, and a dead rack lists its first nodes only.
func TestLaunchFailuresParse(t *testing.T) {
	var l launchFailures
	l.see("stderr", 0, "srun: error: Task launch for StepId=3.0 failed on node n9: Communication connection failure")
	l.see("stdout", -1, "srun: error: Task launch for StepId=3.0 failed on node n8: Communication connection failure")
	l.see("stderr", -1, "srun: error: Application launch failed: Communication connection failure")
	assert.False(t, l.failed(), "a rank's line and stdout are not srun's; the generic line names no node")

	l.see("stderr", -1, "srun: error: Task launch for 7.0 failed on node n1: Invalid job credential")
	l.see("stderr", -1, "srun: error: Task launch for StepId=7.0 failed on node n1: Invalid job credential")
	require.Equal(t, []string{"n1"}, l.nodes, "once per node")
	d := l.describe()
	assert.Contains(t, d, "srun could not start the run's tasks on node n1 (Task launch for 7.0 failed on node n1: Invalid job credential)")
	assert.NotContains(t, d, "crashed", "a refused step is not a dead node")

	var rack launchFailures
	for i := range 10 {
		rack.see("stderr", -1, fmt.Sprintf("srun: error: Task launch for StepId=9.0 failed on node r%d: Communication connection failure", i))
	}
	assert.Equal(t, []string{"r0", "r1", "r2", "r3"}, rack.nodes)
	assert.Contains(t, rack.describe(), "on node r0, r1, r2, r3 and 6 more (")
	assert.Contains(t, rack.describe(), "and on 6 more node(s) (see stderr.log)")

	var esc launchFailures
	esc.see("stderr", -1, "srun: error: Task launch for StepId=9.0 failed on node n\x1b[2J: Communication connection failure")
	assert.NotContains(t, esc.describe(), "\x1b", "a node name is printed terminal-safe")
}
