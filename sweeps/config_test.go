package sweeps

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goldenConfig is a fixed configuration whose ID is pinned below: if the hash or the
// slug changes, every stored result's ID changes, and this test says so.
func goldenConfig() RunConfig {
	return RunConfig{
		Sweep: "golden", Backend: "sim", Launcher: "local", Hardware: "h100-sxm", Model: "llama-1b",
		SeqLen: 2048, Steps: 20, WarmupSteps: 3, Repeats: 1, Timeout: Duration(30 * time.Minute), Seed: 0,
		Nodes: 1, GPUsPerNode: 8, WorldSize: 8, BatchPerDevice: 4, GradAccum: 1, GlobalBatch: 32,
		Sharding: FullShard, BackwardPrefetch: BackwardPre, MixedPrecision: BF16, WrapPolicy: "transformer",
	}
}

func TestGoldenID(t *testing.T) {
	rc := goldenConfig()
	rc.AssignID()
	assert.Equal(t, "ws8-bs4-full_shard-ac0-pre-bcf429385997cf48", rc.ID)
	// The ID results stored before IDs carried 64 bits have, for migration.
	assert.Equal(t, "ws8-bs4-full_shard-ac0-pre-bcf42938", rc.LegacyID())
	assert.Equal(t, "ws8-bs4-full_shard-ac0-pre", rc.Slug)
	assert.Equal(t, rc.Slug, rc.MakeSlug())
	assert.Equal(t, rc.Slug+"-"+rc.Hash(), rc.ID)

	// What is launched, and how, is not part of the ID.
	other := goldenConfig()
	other.Backend, other.Sweep, other.Steps, other.Timeout = "gotrain", "elsewhere", 100, Duration(time.Hour)
	other.BackendOptions = map[string]any{"x": 1}
	other.AssignID()
	assert.Equal(t, rc.ID, other.ID)
	assert.NotEqual(t, rc.Fingerprint(), other.Fingerprint())
}

// TestHashMatchesJSON checks the hand-written encoding against the documented
// definition: SHA-256 of json.Marshal(trainingKey).
func TestHashMatchesJSON(t *testing.T) {
	configs := []RunConfig{goldenConfig(), {}}
	odd := goldenConfig()
	odd.Model = `./configs/<odd> & "quoted"\path` + "\u00e9\u2028\x01"
	odd.Hardware = "h100\tsxm"
	odd.Seed = -42
	odd.ActivationCheckpointing, odd.ForwardPrefetch, odd.CPUOffload, odd.Compile = true, true, true, true
	configs = append(configs, odd)
	for _, kind := range []string{CheckpointSharded, CheckpointFull} {
		for _, resume := range []bool{false, true} {
			ck := goldenConfig()
			ck.Checkpoint, ck.CheckpointEvery, ck.ResumeCheck = kind, 7, resume
			configs = append(configs, ck)
		}
	}
	none := goldenConfig()
	none.Checkpoint, none.CheckpointEvery = CheckpointNone, 7
	configs = append(configs, none)
	// A user's program and files (issue 37): the workload part of the key.
	prog := goldenConfig()
	prog.BackendOptions = map[string]any{"script": "/abs/train.py", "args": []any{"--n=<4>", int64(2)}, "lr": 0.1}
	prog.SpecPaths = map[string]any{"backend_options.script": "train.py"}
	prog.InputHashes = map[string]string{"backend_options.script": "ab", "model": "cd"}
	cmd := goldenConfig()
	cmd.BackendOptions = map[string]any{"command": []any{"deepspeed", "{script_args}"}}
	configs = append(configs, prog, cmd)
	for _, rc := range configs {
		b, err := json.Marshal(rc.trainingKey())
		require.NoError(t, err)
		assert.Equal(t, string(b), string(rc.appendTrainingKey(nil)))
		sum := sha256.Sum256(b)
		assert.Equal(t, hex.EncodeToString(sum[:HashBytes]), rc.Hash())
	}
}

func TestSlug(t *testing.T) {
	rc := goldenConfig()
	rc.Nodes, rc.GPUsPerNode, rc.WorldSize = 2, 8, 16
	rc.GradAccum = 4
	rc.Sharding = HybridShard
	rc.ActivationCheckpointing = true
	rc.BackwardPrefetch = PrefetchNone
	rc.ForwardPrefetch, rc.CPUOffload = true, true
	rc.MixedPrecision = FP32
	assert.Equal(t, "ws16-n2-bs4-ga4-hybrid_shard-ac1-nopf-fwdpf-offload-fp32", rc.MakeSlug())
	rc.BackwardPrefetch = BackwardPost
	assert.Equal(t, "ws16-n2-bs4-ga4-hybrid_shard-ac1-post-fwdpf-offload-fp32", rc.MakeSlug())
}

func BenchmarkAssignID(b *testing.B) {
	rc := goldenConfig()
	b.ReportAllocs()
	for b.Loop() {
		rc.AssignID()
	}
}
