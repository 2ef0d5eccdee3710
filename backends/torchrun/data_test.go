package torchrun

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/model"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestDataKindsMatchGotrain: the torchrun option names gotrain's data sets.
func TestDataKindsMatchGotrain(t *testing.T) {
	assert.Equal(t, model.DataKinds, DataKinds)
	assert.Equal(t, model.DataRandom, DataRandom)
	assert.Equal(t, model.DataRepeat, DataRepeat)
}

// TestDataOption (issue 37 item 9): backend_options.data reaches the project
// script as --data (random, the default, adds nothing to its argv), and is
// refused, with the reason, where the script is the user's: it makes its
// own data.
func TestDataOption(t *testing.T) {
	rc := sweeps.RunConfig{Seed: 1, SeqLen: 16, BatchPerDevice: 1, Steps: 3, Sharding: sweeps.FullShard, MixedPrecision: sweeps.FP32}
	o, err := ParseOptions(nil)
	require.NoError(t, err)
	assert.Empty(t, o.Data, "random")
	assert.NotContains(t, ScriptArgs(rc, o, contract.Paths{}), "--data")
	o, err = ParseOptions(map[string]any{"data": "random"})
	require.NoError(t, err)
	assert.NotContains(t, ScriptArgs(rc, o, contract.Paths{}), "--data")
	o, err = ParseOptions(map[string]any{"data": "repeat"})
	require.NoError(t, err)
	assert.Contains(t, strings.Join(ScriptArgs(rc, o, contract.Paths{}), " "), "--data repeat")

	for _, tc := range []struct {
		opts map[string]any
		want string
	}{
		{map[string]any{"data": "copy"}, `backend_options.data: must be one of [random repeat]`},
		{map[string]any{"data": "repeat", "script": "train.py"}, "your script makes its own data, so drop data"},
		{map[string]any{"data": "repeat", "args": []any{"--x"}}, "args replaces the script's flags"},
	} {
		_, err := ParseOptions(tc.opts)
		require.Error(t, err, "%v", tc.opts)
		var se *backends.SpecError
		assert.True(t, errors.As(err, &se), "a spec error: %v", err)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// TestScriptRepeatDataMatchesGo: the project script's --data repeat tokens are
// gotrain's, token for token. The script's plain-Python functions are run
// alone (the test needs python3, not torch or numpy).
func TestScriptRepeatDataMatchesGo(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	// Load the script's constants and the functions the repeat data needs,
	// without its imports of numpy and torch.
	const prog = `import ast, json, sys
src = open(sys.argv[1]).read()
tree = ast.parse(src)
want = {"MASK64", "GOLDEN", "REPEAT_PERIOD", "fnv1a64", "splitmix64_int", "repeat_pattern", "repeat_tokens"}
keep = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in want) or
        (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in want for t in n.targets))]
ns = {}
exec(compile(ast.Module(body=keep, type_ignores=[]), "fsdpbench_train.py", "exec"), ns)
out = []
for seed, first, n, seq, vocab in json.loads(sys.argv[2]):
    out.append({"pattern": ns["repeat_pattern"](seed, vocab), "tokens": ns["repeat_tokens"](seed, first, n, seq, vocab)})
print(json.dumps(out))
`
	cases := [][5]uint64{{9, 0, 4, 16, 256}, {7, 100, 3, 40, 50257}, {1<<63 + 5, 3, 2, 8, 5}, {0, 0, 1, 4, 1}}
	arg, err := json.Marshal(cases)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", prog, script, string(arg)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var got []struct {
		Pattern []int32   `json:"pattern"`
		Tokens  [][]int32 `json:"tokens"`
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	require.Len(t, got, len(cases))
	for i, c := range cases {
		seed, first, n, seq, vocab := c[0], int(c[1]), int(c[2]), int(c[3]), int(c[4])
		assert.Equal(t, model.RepeatPattern(seed, vocab), got[i].Pattern, "pattern %v", c)
		in, tg, err := model.RepeatBatch(seed, first, n, seq, vocab)
		require.NoError(t, err)
		require.Len(t, got[i].Tokens, n)
		for s, row := range got[i].Tokens {
			require.Len(t, row, seq+1)
			assert.Equal(t, in[s*seq:(s+1)*seq], row[:seq], "inputs %v sample %d", c, s)
			assert.Equal(t, tg[s*seq:(s+1)*seq], row[1:], "targets %v sample %d", c, s)
		}
	}
}

// TestRepeatDataParity: on --data repeat the project script trains tiny loss
// for loss as gotrain does, and both learn (needs torch, as
// TestCrossEngineParity).
func TestRepeatDataParity(t *testing.T) {
	needTorch(t)
	shape, err := shapes.Lookup("tiny")
	require.NoError(t, err)
	const steps = 30
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	tr, err := fsdp.New(ctx, cpu.New(cpu.Options{}), oneRankWorld(ctx, t), fsdp.Config{Shape: shape, Sharding: sweeps.NoShard,
		BatchPerDevice: run.batch, SeqLen: run.seqLen, Seed: run.seed, LR: run.lr, WeightDecay: run.weightDecay, Data: model.DataRepeat})
	require.NoError(t, err)
	defer tr.Close()
	var goLosses []float64
	for range steps {
		rep, err := tr.Step(ctx)
		require.NoError(t, err)
		goLosses = append(goLosses, rep.Loss)
	}

	dir := t.TempDir()
	shapePath, outPath := filepath.Join(dir, "shape.json"), filepath.Join(dir, "out.json")
	b, err := json.Marshal(shape)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(shapePath, b, 0o600))
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	cmd := exec.CommandContext(ctx, python, script, "--model-json", shapePath, "--seed", strconv.FormatUint(run.seed, 10),
		"--seq-len", strconv.Itoa(run.seqLen), "--batch", strconv.Itoa(run.batch), "--steps", strconv.Itoa(steps),
		"--lr", f(run.lr), "--weight-decay", f(run.weightDecay), "--data", "repeat", "--out", outPath)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=2")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	raw, err := os.ReadFile(outPath)
	require.NoError(t, err)
	var res struct {
		Losses []float64 `json:"losses"`
	}
	require.NoError(t, json.Unmarshal(raw, &res))
	require.Len(t, res.Losses, steps)
	for s := range steps {
		// Training compounds the engines' float differences; a looser bound
		// than the random-data parity's five steps.
		assert.InEpsilon(t, goLosses[s], res.Losses[s], 1e-3, "step %d", s+1)
	}
	lnV := math.Log(float64(shape.Vocab))
	assert.Less(t, goLosses[steps-1], lnV/2, "both engines learn the repeated sequence: %v", goLosses)
}
