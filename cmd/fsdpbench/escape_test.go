package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a run or a folder name says reaches the operator's terminal escaped: a
// window-title sequence, a screen clear and an RTL override in an ingested
// folder's name and in a run's error line come out as visible text.
func TestHostileTextIsEscapedOnTheTerminal(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	out := filepath.Join(root, "out")
	hostile := "run\x1b]0;owned\x07\x1b[2J\u202eexe.txt"
	writeJSONFile(t, filepath.Join(root, "in", hostile), "metrics.json", seedOneNode())

	ing := fsdpbench(t, repoRoot, "ingest", filepath.Join(root, "in"), "--name", "esc", "--results", out,
		"--fsdp-sharding", "full_shard", "--set", "hardware=h100-sxm", "--set", "gpus_per_node=8",
		"--set", "seq_len=512", "--set", "batch_per_device=1")
	require.Equal(t, 0, ing.code, ing.stderr)
	assert.NotContains(t, ing.stdout, "\x1b")
	assert.NotContains(t, ing.stdout, "\u202e")
	assert.Contains(t, ing.stdout, `run\x1b]0;owned\x07\x1b[2J\u202eexe.txt`)

	// The stored run, marked failed with a script's exception line.
	runs, err := filepath.Glob(filepath.Join(out, "esc", "runs", "*", "metrics.json"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	data, err := os.ReadFile(runs[0])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	m["status"] = "failed"
	m["error"] = "Traceback: \x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\ \x1b[2J"
	for _, k := range []string{"tokens_per_s_per_rank", "tokens_per_s", "mfu", "step_time_s", "samples_per_s"} {
		delete(m, k)
	}
	data, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(runs[0], data, 0o644))

	rep := fsdpbench(t, repoRoot, "report", filepath.Join(out, "esc"), "--metric", "error")
	require.Equal(t, 0, rep.code, rep.stderr)
	assert.NotContains(t, rep.stdout, "\x1b")
	assert.Contains(t, rep.stdout, `Traceback: \x1b]8;;http://evil`)
}
