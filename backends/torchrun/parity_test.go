package torchrun

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// python is Debian's interpreter, the one python3-torch installs torch for.
const python = "/usr/bin/python3"

// script is the reference trainer, relative to this package's directory (go test's
// working directory).
const script = "python/fsdpbench_train.py"

// testTimeout bounds the collectives, the Python run and the torch probe.
const testTimeout = 60 * time.Second

// requireTorch makes the test fail instead of skip when torch is missing (CI).
const requireTorch = "FSDPBENCH_REQUIRE_TORCH"

// parity is one run both engines train: tiny at the Go trainer's parity settings.
type parity struct {
	seed                   uint64
	seqLen, batch, steps   int
	lr, weightDecay, relTo float64
}

var run = parity{seed: 7, seqLen: 16, batch: 4, steps: 5, lr: 3e-3, weightDecay: 0.01, relTo: 1e-4}

// TestCrossEngineParity trains tiny with the Go trainer (one rank, no_shard) and
// with the PyTorch reference script, and requires the same loss at every step.
func TestCrossEngineParity(t *testing.T) {
	needTorch(t)
	shape, err := shapes.Lookup("tiny")
	require.NoError(t, err)

	goLosses := trainGo(t, shape, run.lr)
	pyLosses := trainTorch(t, shape)
	require.Len(t, pyLosses, run.steps, "the script reported the wrong number of steps")
	require.Len(t, goLosses, run.steps)

	worst, worstStep := 0.0, 0
	for s := range run.steps {
		rel := math.Abs(pyLosses[s]-goLosses[s]) / math.Abs(goLosses[s])
		assert.LessOrEqual(t, rel, run.relTo, "step %d: go loss %.7f, torch loss %.7f", s+1, goLosses[s], pyLosses[s])
		if rel > worst {
			worst, worstStep = rel, s+1
		}
	}
	t.Logf("go losses %v", goLosses)
	t.Logf("torch losses %v", pyLosses)
	t.Logf("worst relative difference %.3g at step %d (tolerance %g)", worst, worstStep, run.relTo)

	// Every step has its own batch, so the losses move even without training; the
	// test must also tell a trainer that updates from one that does not. The same
	// run at a negligible learning rate is that no-op trainer: the real run's last
	// loss must be far from it, so that parity within the tolerance means both
	// engines trained.
	moved := 0.0
	for s := 1; s < run.steps; s++ {
		moved = max(moved, math.Abs(goLosses[s]-goLosses[s-1])/goLosses[s-1])
	}
	assert.Greater(t, moved, 10*run.relTo, "the loss did not change over %d steps: %v", run.steps, goLosses)
	frozen := trainGo(t, shape, 1e-30)
	last := run.steps - 1
	trained := math.Abs(goLosses[last]-frozen[last]) / frozen[last]
	t.Logf("step %d: trained loss %.7f, untrained %.7f (relative %.3g)", last+1, goLosses[last], frozen[last], trained)
	assert.Greater(t, trained, 10*run.relTo, "training moved the loss by less than 10x the parity tolerance; the test cannot tell a trainer from a no-op")
}

// needTorch skips (or, under FSDPBENCH_REQUIRE_TORCH=1, fails) when Debian's python
// cannot import torch.
func needTorch(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", "import torch, numpy").CombinedOutput()
	if err == nil {
		return
	}
	msg := "cannot run the PyTorch reference: " + python + " cannot import torch (" + err.Error() + ": " +
		string(out) + "); install it with `apt-get install python3-torch python3-numpy`"
	if os.Getenv(requireTorch) == "1" {
		t.Fatal(msg + " (" + requireTorch + "=1 makes this a failure)")
	}
	t.Skip(msg + " (set " + requireTorch + "=1 to fail instead)")
}

// trainGo runs the Go trainer in-process on a one-rank world at learning rate lr.
func trainGo(t *testing.T, shape shapes.Shape, lr float64) []float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	world := oneRankWorld(ctx, t)
	cfg := fsdp.Config{Shape: shape, Sharding: sweeps.NoShard, BatchPerDevice: run.batch, SeqLen: run.seqLen,
		Seed: run.seed, LR: lr, WeightDecay: run.weightDecay}
	tr, err := fsdp.New(ctx, cpu.New(cpu.Options{}), world, cfg)
	require.NoError(t, err)
	defer tr.Close()
	require.Equal(t, run.batch, tr.GlobalBatch())
	losses := make([]float64, 0, run.steps)
	for range run.steps {
		rep, err := tr.Step(ctx)
		require.NoError(t, err)
		losses = append(losses, rep.Loss)
	}
	return losses
}

// oneRankWorld opens a world of one rank over loopback.
func oneRankWorld(ctx context.Context, t *testing.T) comm.Communicator {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() {
		_, err := rendezvous.Server{WorldSize: 1, Timeout: testTimeout}.Serve(ctx, ln)
		served <- err
	}()
	opts := comm.Options{OpTimeout: testTimeout, ConnectTimeout: testTimeout, Host: "testhost"}
	c, err := comm.Join(ctx, ln.Addr().String(), 0, 1, opts)
	require.NoError(t, err)
	require.NoError(t, <-served)
	t.Cleanup(func() { c.Close() })
	return c
}

// trainTorch runs the reference script and returns its per-step losses.
func trainTorch(t *testing.T, shape shapes.Shape) []float64 {
	t.Helper()
	dir := t.TempDir()
	shapePath, outPath := filepath.Join(dir, "shape.json"), filepath.Join(dir, "out.json")
	b, err := json.Marshal(shape)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(shapePath, b, 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	cmd := exec.CommandContext(ctx, python, script,
		"--model-json", shapePath,
		"--seed", strconv.FormatUint(run.seed, 10),
		"--seq-len", strconv.Itoa(run.seqLen),
		"--batch", strconv.Itoa(run.batch),
		"--steps", strconv.Itoa(run.steps),
		"--lr", f(run.lr),
		"--weight-decay", f(run.weightDecay),
		"--out", outPath)
	// Two threads: the machine is shared and tiny gains nothing from more.
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=2")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s failed:\n%s", python, script, out)
	raw, err := os.ReadFile(outPath)
	require.NoError(t, err, "the script wrote no result; its output:\n%s", out)
	var res struct {
		Losses []float64 `json:"losses"`
	}
	require.NoError(t, json.Unmarshal(raw, &res), "result %s", raw)
	return res.Losses
}
