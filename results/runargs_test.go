package results

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadChecksRunArgs damages one stored run_args.json field at a time: Load used
// to hand world_size -3 or sharding "banana" to report and export as they were.
// Each is refused naming the file, the run and the field; the intact sweep loads.
func TestLoadChecksRunArgs(t *testing.T) {
	for _, tc := range []struct {
		field string
		value any
		want  string
	}{
		{"world_size", -3, "world_size -3 is not between 1 and 131072"},
		{"nodes", 0, "nodes 0 is not between 1 and 131072"},
		{"gpus_per_node", 3, "world_size 1 is not nodes 1 × gpus_per_node 3"},
		{"sharding", "banana", `sharding "banana" is not one of full_shard, shard_grad_op, hybrid_shard, no_shard, ddp`},
		{"mixed_precision", "fp8", `mixed_precision "fp8" is not one of`},
		{"seq_len", 1 << 40, "seq_len 1099511627776 is not between 1 and"},
		{"steps", -1, "steps -1 is not between 1 and"},
		{"checkpoint", "sometimes", `checkpoint "sometimes" is not one of none, sharded, full`},
		{"seed", -7, "seed -7 is not between 0 and"},
		{"model", string(make([]byte, 5000)), "model is 5000 bytes long, more than 1024"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			sd, rcs := fixtureSweep(t)
			_, err := Load(sd.Path)
			require.NoError(t, err)
			path := filepath.Join(sd.RunDir(rcs[0].ID), RunArgsFile)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal(b, &m))
			m[tc.field] = tc.value
			b, err = json.Marshal(m)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, b, 0o644))
			_, err = Load(sd.Path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path+" (run "+rcs[0].ID+"): invalid run: "+tc.want)
		})
	}
}
