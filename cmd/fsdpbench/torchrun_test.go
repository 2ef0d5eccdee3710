package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// repoRoot is where the example specs' relative paths (scripts) resolve.
const repoRoot = "../.."

// needTorch skips without Debian's torch, and fails instead in CI, where .ci/run
// installs it and sets FSDPBENCH_REQUIRE_TORCH=1.
func needTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch, numpy").Run(); err != nil {
		if os.Getenv("FSDPBENCH_REQUIRE_TORCH") == "1" {
			t.Fatalf("FSDPBENCH_REQUIRE_TORCH=1 but /usr/bin/python3 cannot import torch and numpy (%v): run .ci/deps", err)
		}
		t.Skipf("no torch in /usr/bin/python3 (%v); apt install python3-torch python3-numpy", err)
	}
}

// csvRows exports a sweep as CSV and returns its rows as maps of column to cell.
func csvRows(t *testing.T, sweepDir string) ([]string, []map[string]string) {
	t.Helper()
	res := fsdpbench(t, repoRoot, "export", sweepDir, "--format", "csv")
	require.Equal(t, 0, res.code, res.stderr)
	recs, err := csv.NewReader(bytes.NewBufferString(res.stdout)).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	var rows []map[string]string
	for _, rec := range recs[1:] {
		row := map[string]string{}
		for j, c := range recs[0] {
			row[c] = rec[j]
		}
		rows = append(rows, row)
	}
	return recs[0], rows
}

// TestTorchrunSweepOfTheProjectScript runs the torchrun-ddp-cpu example through
// real torchrun (DDP over gloo, world size 1 and 2, checkpointing on and off):
// every run is ok, the CSV has the columns every backend's has, and the loss is
// the same at every world size and with checkpointing (the same global batch).
func TestTorchrunSweepOfTheProjectScript(t *testing.T) {
	needTorch(t)
	out := t.TempDir()
	res := fsdpbench(t, repoRoot, "sweep", "sweeps/examples/torchrun-ddp-cpu.yaml", "--results", out)
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stdout+res.stderr, "4 runs: 4 ok")

	header, rows := csvRows(t, filepath.Join(out, "torchrun-ddp-cpu"))
	assert.Equal(t, results.Columns()[0].Name, header[0])
	require.Len(t, header, len(results.Columns()), "the same columns as every backend")
	require.Len(t, rows, 4)
	seen := map[string]bool{}
	var loss0 float64
	for i, r := range rows {
		assert.Equal(t, "ok", r["status"], r["id"])
		seen[r["world_size"]+"/"+r["activation_checkpointing"]] = true
		for _, col := range []string{"tokens_per_s_per_rank", "mfu", "peak_rss_bytes", "loss_last", "step_time_s.median"} {
			v, err := strconv.ParseFloat(r[col], 64)
			require.NoError(t, err, "%s: column %s = %q", r["id"], col, r[col])
			assert.Positive(t, v, "%s: %s", r["id"], col)
		}
		loss, _ := strconv.ParseFloat(r["loss_last"], 64)
		if i == 0 {
			loss0 = loss
		}
		assert.InEpsilon(t, loss0, loss, 1e-5, "%s: the loss must not depend on world size or checkpointing", r["id"])
	}
	assert.Len(t, seen, 4, "world size 1 and 2, checkpointing on and off: %v", seen)
}

// TestTorchrunSweepOfAUsersScript runs examples/user-script/train.py, which knows
// nothing of fsdpbench, through the argument template: its metrics.json figures
// land in the table, and the throughput is its tokens over its wall time.
func TestTorchrunSweepOfAUsersScript(t *testing.T) {
	needTorch(t)
	out := t.TempDir()
	res := fsdpbench(t, repoRoot, "sweep", "sweeps/examples/torchrun-user-script.yaml", "--results", out)
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	sweepDir := filepath.Join(out, "torchrun-user-script")

	_, rows := csvRows(t, sweepDir)
	require.Len(t, rows, 4)
	for _, r := range rows {
		require.Equal(t, "ok", r["status"], r["id"])
		runDir := filepath.Join(sweepDir, results.RunsDir, r["id"])
		data, err := os.ReadFile(filepath.Join(runDir, "output", "out", "metrics.json"))
		require.NoError(t, err, "the script writes its metrics.json where the template told it")
		var own struct {
			Wall   float64 `json:"wall_time_s"`
			Tokens float64 `json:"approx_tokens_per_rank"`
			World  int     `json:"world_size"`
		}
		require.NoError(t, json.Unmarshal(data, &own))
		ws, _ := strconv.Atoi(r["world_size"])
		assert.Equal(t, ws, own.World)
		tps, err := strconv.ParseFloat(r["tokens_per_s_per_rank"], 64)
		require.NoError(t, err)
		assert.InEpsilon(t, own.Tokens/own.Wall, tps, 1e-9, "%s: tokens/s/rank is the script's tokens over its wall time", r["id"])
		assert.Empty(t, r["mfu"], "the script's model is not the model axis: MFU must stay unknown")

		// The template passed the run's axes as the script's own flags.
		var argv []string
		data, err = os.ReadFile(filepath.Join(runDir, "command.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &argv))
		assert.Contains(t, argv, "--batch_size_per_device")
		if r["activation_checkpointing"] == "true" {
			assert.Contains(t, argv, "--gradient_checkpointing")
		} else {
			assert.NotContains(t, argv, "--gradient_checkpointing")
		}
	}

	rep := fsdpbench(t, repoRoot, "report", sweepDir, "--rows", "world_size", "--cols", "activation_checkpointing")
	require.Equal(t, 0, rep.code, rep.stderr)
	assert.Contains(t, rep.stdout, "activation_checkpointing")
}

// TestIngestComparesWithAFreshSweep runs the user's script by hand under torchrun,
// as a team's past run was (results/training/<run>/ with run_args.json and the
// script's metrics.json), ingests that folder with the example's spec, and compares
// it with a fresh sweep of the example: the same settings give the same run ID.
func TestIngestComparesWithAFreshSweep(t *testing.T) {
	needTorch(t)
	out := t.TempDir()
	res := fsdpbench(t, repoRoot, "sweep", "sweeps/examples/torchrun-user-script.yaml", "--results", out,
		"--set", "world_size=2", "--set", "activation_checkpointing=true")
	require.Equal(t, 0, res.code, res.stderr)

	past := filepath.Join(t.TempDir(), "results", "training", "run-2gpu-gc")
	args := map[string]any{"batch_size_per_device": 4, "seq_len": 128, "max_steps": 20, "gradient_checkpointing": true,
		"output_dir": past, "learning_rate": 1e-3}
	train := exec.Command("/usr/bin/python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
		"--redirects", "2", "--tee", "2", "examples/user-script/train.py", "--batch_size_per_device", "4",
		"--seq_len", "128", "--max_steps", "20", "--gradient_checkpointing", "--output_dir", past)
	train.Dir = repoRoot
	outb, err := train.CombinedOutput()
	require.NoError(t, err, string(outb))
	data, err := json.Marshal(args)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(past, "run_args.json"), data, 0o644))

	ing := fsdpbench(t, repoRoot, "ingest", filepath.Dir(filepath.Dir(past)), "--spec", "sweeps/examples/torchrun-user-script.yaml",
		"--name", "past", "--results", out)
	require.Equal(t, 0, ing.code, ing.stderr)
	assert.Contains(t, ing.stdout, "not mapped (kept in extra.run_args): learning_rate, output_dir")

	cmp := fsdpbench(t, repoRoot, "compare", filepath.Join(out, "past"), filepath.Join(out, "torchrun-user-script"))
	require.Equal(t, 0, cmp.code, cmp.stderr)
	fresh, err := results.Load(filepath.Join(out, "torchrun-user-script"))
	require.NoError(t, err)
	require.Len(t, fresh, 1)
	assert.Contains(t, cmp.stdout, fresh[0].Config.ID, "the ingested run and the fresh one are matched by ID:\n%s", cmp.stdout)
	assert.NotContains(t, cmp.stdout, "missing", "nothing is left unmatched:\n%s", cmp.stdout)
}
