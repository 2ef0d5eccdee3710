package gotrain

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// fakeWorkers is a Backend whose workers are a shell script standing in for
// `fsdpbench worker`, so a test can make them report what a real trainer may.
func fakeWorkers(t *testing.T, script string) *Backend {
	t.Helper()
	path := filepath.Join(t.TempDir(), "worker.sh")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755))
	return &Backend{executable: func() (string, error) { return path, nil }}
}

// TestWorkerReportsAreChecked: a worker that stops on a NaN loss makes the run
// diverged (a result, with the loss and the step), and a broken FSDPBENCH line
// or rank file fails the run with the field named; both used to be dropped or
// taken as they came.
func TestWorkerReportsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		status       results.Status
		want         string
	}{
		{"diverged", `echo "fsdpbench worker: gotrain worker: rank $RANK: diverged: the loss is NaN at measured step 2 of 3 (lr 10)" >&2; exit 5`,
			results.StatusDiverged, "diverged: the loss is NaN at measured step 2 of 3 (lr 10) (rank "},
		{"negative step time", `[ "$RANK" = 0 ] && echo 'FSDPBENCH {"event":"step","rank":0,"step":1,"loss":2.5,"step_time_s":-1,"tokens":64}'; exit 0`,
			results.StatusFailed, `gotrain: a worker printed a broken FSDPBENCH line: rank 0: step_time_s is -1; a time must be a number of seconds from 1e-09 to 1e+06: "FSDPBENCH {`},
		{"broken JSON", `[ "$RANK" = 0 ] && echo 'FSDPBENCH {"event":"step",,}'; exit 0`,
			results.StatusFailed, "rank 0: event:1:17: invalid character ','"},
		{"bad rank file", `mkdir -p "$(dirname "$FSDPBENCH_RUN_CONFIG")/ranks"; echo '{"rank": '$RANK', "step_times_s": [0.1, 0, 0.1], "losses": [1, 1, 1]}' > "$(dirname "$FSDPBENCH_RUN_CONFIG")/ranks/rank-$RANK.json"; exit 0`,
			results.StatusFailed, "rank-0.json: step_times_s[1] is 0; a time must be a number of seconds from 1e-09 to"},
		{"unknown gather path", `mkdir -p "$(dirname "$FSDPBENCH_RUN_CONFIG")/ranks"; echo '{"rank": '$RANK', "step_times_s": [0.1, 0.1, 0.1], "losses": [1, 1, 1], "gathers": "teleport"}' > "$(dirname "$FSDPBENCH_RUN_CONFIG")/ranks/rank-$RANK.json"; exit 0`,
			results.StatusFailed, `rank-0.json: gathers is "teleport", not one of [none zero-copy shared copy]`},
		{"absurd launch count", `mkdir -p "$(dirname "$FSDPBENCH_RUN_CONFIG")/ranks"; echo '{"rank": '$RANK', "step_times_s": [0.1, 0.1, 0.1], "losses": [1, 1, 1], "kernel_launches_per_step": 2000000000}' > "$(dirname "$FSDPBENCH_RUN_CONFIG")/ranks/rank-$RANK.json"; exit 0`,
			results.StatusFailed, `rank-0.json: kernel_launches_per_step is 2e+09`},
		{"rank file type error", `mkdir -p "$(dirname "$FSDPBENCH_RUN_CONFIG")/ranks"; printf '{"rank": 0,\n "losses": "x"}' > "$(dirname "$FSDPBENCH_RUN_CONFIG")/ranks/rank-$RANK.json"; exit 0`,
			results.StatusFailed, "rank-0.json:2:12: json: cannot unmarshal string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := tinyRun(2, 1, sweeps.FullShard)
			res, err := fakeWorkers(t, tc.script).Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.status, res.Status, res.Error)
			assert.Contains(t, res.Error, tc.want)
		})
	}
}

func TestStepEvent(t *testing.T) {
	we, ok, err := stepEvent(`FSDPBENCH {"event":"step","rank":0,"step":2,"loss":2.5,"step_time_s":0.1,"tokens":64}`)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, 2, we.Step)
	for _, other := range []string{"loading", `FSDPBENCH {"event":"step","step":1,"warmup":true,"step_time_s":0.1}`, `FSDPBENCH {"event":"done"}`} {
		_, ok, err := stepEvent(other)
		assert.False(t, ok, other)
		assert.NoError(t, err, other)
	}
	for _, bad := range []string{`FSDPBENCH {"event":"step","step":0,"step_time_s":0.1}`, `FSDPBENCH {"event":"step","step":1,"step_time_s":1e9}`,
		`FSDPBENCH {"event":"step","step":1,"step_time_s":0.1,"tokens":-1}`, `FSDPBENCH nonsense`} {
		_, ok, err := stepEvent(bad)
		assert.False(t, ok, bad)
		assert.Error(t, err, bad)
	}
}

func TestExitCodeOfDivergence(t *testing.T) {
	assert.Equal(t, ExitDiverged, ExitCode(fmt.Errorf("gotrain worker: rank 1: %w: the loss is NaN", errDiverged)))
	assert.Equal(t, "diverged: rank 3's loss became NaN or infinite", divergedError(3, "some\nother lines"))
	assert.True(t, strings.HasPrefix(divergedError(0, "x\nfsdpbench worker: diverged: the loss is +Inf at warm-up step 1 of 1"), "diverged: the loss is +Inf"))
}

// FuzzParseOptions: whatever backend_options gotrain accepts is within bounds,
// and whatever it refuses is a spec error.
func FuzzParseOptions(f *testing.F) {
	for _, n := range optionNames {
		f.Add(n, "1")
	}
	f.Add("lr", "NaN")
	f.Add("step_delay", "forever")
	f.Add("mem_limit_bytes", "1e19")
	f.Add("lrr", "0.1")
	f.Fuzz(func(t *testing.T, key, value string) {
		o, err := ParseOptions(map[string]any{key: value})
		if err != nil {
			if !backends.IsSpecError(err) {
				t.Fatalf("a bad option is not a spec error: %v", err)
			}
			return
		}
		if !(o.LR > 0 && o.LR <= maxLR) || !(o.WeightDecay >= 0 && o.WeightDecay <= maxWeightDecay) ||
			!(o.GradClip >= 0 && o.GradClip <= maxGradClip) || o.StepDelay < 0 || o.StepDelay > maxStepDelay ||
			o.MemLimitBytes < 0 || o.MemLimitBytes > maxMemLimit {
			t.Fatalf("accepted %q=%q as %+v", key, value, o)
		}
	})
}
