package hardware

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

func TestExampleProfileFile(t *testing.T) {
	p, err := Lookup("../../examples/hardware/my-gpu.yaml")
	require.NoError(t, err)
	assert.Equal(t, "my-a100-40g", p.Name)
	assert.Equal(t, 312e12, p.PeakFLOPS["bf16"])
	assert.Equal(t, 19.5e12, p.PeakFLOPS["fp32"])
	assert.Equal(t, int64(40)<<30, p.MemBytes)
	assert.Equal(t, 8, p.GPUsPerNode)
	assert.Equal(t, 230e9, p.IntraNodeBusBWBytesPerS)
	assert.Equal(t, 200e9, p.InterNodeBusBWBytesPerS)
	assert.Equal(t, 1555e9, p.MemBWBytesPerS)
	assert.Equal(t, 0.6, p.Efficiency)
	assert.Equal(t, 0.55, p.AttentionEfficiency)
	assert.Equal(t, 2048.0, p.AttentionHalfSeq)
	assert.True(t, p.IsGPU)
	require.NoError(t, Check("../../examples/hardware/my-gpu.yaml"))
}

func TestProfileFileDefaultsAndCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu-x.yml")
	require.NoError(t, os.WriteFile(path, []byte("peak_tflops: {bf16: 100}\nmemory_gib: 24\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n"), 0o644))
	p, err := Lookup(path)
	require.NoError(t, err)
	assert.Equal(t, "gpu-x", p.Name, "named after the file")
	assert.Equal(t, defaultInterNodeBusBW, p.InterNodeBusBWBytesPerS)
	assert.Equal(t, gpuEfficiency, p.Efficiency)
	assert.Zero(t, p.AttentionEfficiency, "attention at the matmuls' efficiency unless given")
	assert.Zero(t, p.AttentionHalfSeq, "one attention rate at every length unless given")
	// The table is read again when the file changes.
	require.NoError(t, os.WriteFile(path, []byte("peak_tflops: {bf16: 200}\nmemory_gib: 48\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n"), 0o644))
	later := time.Now().Add(2 * time.Second)
	require.NoError(t, os.Chtimes(path, later, later))
	p, err = Lookup(path)
	require.NoError(t, err)
	assert.Equal(t, 200e12, p.PeakFLOPS["bf16"])
}

func TestProfileFileErrors(t *testing.T) {
	const ok = "peak_tflops: {bf16: 100}\nmemory_gib: 24\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n"
	tests := []struct {
		name, file string
		line, col  int
		want       []string
	}{
		{"attention efficiency above 1", ok + "attention_efficiency: 1.5\n", 5, 23, []string{"attention_efficiency: 1.5 is out of range"}},
		{"unknown key", ok + "memory_gb: 24\n", 5, 1, []string{`unknown key "memory_gb"`, "did you mean memory_gib?"}},
		{"out of range", "peak_tflops: {bf16: 100}\nmemory_gib: 40960\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n", 2, 13, []string{"memory_gib: 40960 is out of range [0.25, 16384]", "MiB / 1024"}},
		{"a string", "peak_tflops: {bf16: lots}\nmemory_gib: 24\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n", 1, 21, []string{"peak_tflops.bf16: must be a number", "lots"}},
		{"sparse typo", "peak_tflops: {bf16: 100, bf61: 3}\nmemory_gib: 24\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n", 1, 26, []string{"peak_tflops.bf61: unknown precision", "did you mean bf16?"}},
		{"no bf16", "peak_tflops: {fp32: 10}\nmemory_gib: 24\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n", 1, 12, []string{"peak_tflops.bf16 is required"}},
		{"no memory", "peak_tflops: {bf16: 100}\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n", 1, 12, []string{"memory_gib is required"}},
		{"fractional GPUs", "peak_tflops: {bf16: 100}\nmemory_gib: 24\ngpus_per_node: 4.5\nintra_node_bus_bw_gbps: 64\n", 3, 16, []string{"gpus_per_node: must be a whole number"}},
		{"zero efficiency", ok + "efficiency: 0\n", 5, 13, []string{"efficiency: 0 is out of range [0.001, 1]"}},
		{"built-in name", "name: h100-sxm\n" + ok, 1, 7, []string{"name must be a new profile name", "not a built-in one"}},
		{"twice", ok + "memory_gib: 30\n", 5, 1, []string{"memory_gib is given twice"}},
		{"not a mapping", "- 1\n- 2\n", 1, 1, []string{"a hardware profile is a mapping of"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gpu.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tt.file), 0o644))
			_, err := Lookup(path)
			require.Error(t, err)
			var ie *input.Error
			require.True(t, errors.As(err, &ie), "%T %v", err, err)
			assert.Equal(t, [2]int{tt.line, tt.col}, [2]int{ie.Line, ie.Column}, err.Error())
			assert.Contains(t, err.Error(), path+":")
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	_, err := Lookup(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "relative to the spec's folder")
}

// TestProfileFileExponentNumbers: 4e1, 6e-1 and 1e308, unquoted, are numbers
// (YAML 1.2's core schema, as the sweep spec reads them), so legal values are
// taken and out-of-range ones are refused with their range; a quoted "4e1" is
// still a string.
func TestProfileFileExponentNumbers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu-e.yaml")
	require.NoError(t, os.WriteFile(path, []byte("peak_tflops: {bf16: 1e2}\nmemory_gib: 4e1\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\nefficiency: 6e-1\n"), 0o644))
	p, err := Lookup(path)
	require.NoError(t, err)
	assert.Equal(t, 100e12, p.PeakFLOPS["bf16"])
	assert.Equal(t, int64(40<<30), p.MemBytes)
	assert.Equal(t, 0.6, p.Efficiency)

	for _, tc := range []struct{ file, want string }{
		{"peak_tflops: {bf16: 100}\nmemory_gib: 1e308\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n", "memory_gib: 1e+308 is out of range [0.25, 16384]"},
		{"peak_tflops: {bf16: 1e999}\nmemory_gib: 24\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n", "peak_tflops.bf16: +Inf is out of range"},
		{"peak_tflops: {bf16: 100}\nmemory_gib: 24\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\nefficiency: 6e1\n", "efficiency: 60 is out of range [0.001, 1]"},
		{"peak_tflops: {bf16: 100}\nmemory_gib: \"4e1\"\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n", `memory_gib: must be a number, got the quoted string "4e1" (a number is written without quotes)`},
		{"peak_tflops: {bf16: 100}\nmemory_gib: 4e\ngpus_per_node: 4\nintra_node_bus_bw_gbps: 64\n", `memory_gib: must be a number, got the string "4e"`},
	} {
		path := filepath.Join(t.TempDir(), "gpu.yaml")
		require.NoError(t, os.WriteFile(path, []byte(tc.file), 0o644))
		_, err := Lookup(path)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
		assert.NotContains(t, err.Error(), "got the string \"4e1\"")
	}
}
