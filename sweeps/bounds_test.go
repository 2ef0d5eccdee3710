package sweeps

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNumbersBounded is issue 13 §3: every number of a spec has an upper bound,
// refused at its position with the bound said (world_size 1e12 once reached
// gotrain and died out of memory; steps 1e12 and repeats 1e8 grew the sim
// without bound; seq_len 1e9 overflowed the sim's memory figures).
func TestNumbersBounded(t *testing.T) {
	for _, tc := range []struct {
		name, spec, want string
	}{
		{"world_size", "name: x\nbase: {world_size: 1000000000000}\n", "spec.yaml:2:20: world_size must be a positive integer (at most 131072), got 1000000000000"},
		{"nodes", "name: x\nbase: {nodes: 100000, gpus_per_node: 8}\n", "spec.yaml:2:15: nodes must be a positive integer (at most 16384), got 100000"},
		{"gpus_per_node", "name: x\nbase: {gpus_per_node: 5000}\n", "gpus_per_node must be a positive integer (at most 1024), got 5000"},
		{"batch_per_device", "name: x\ngrid: {batch_per_device: [1, 100000]}\n", "spec.yaml:2:30: batch_per_device must be a positive integer (at most 65536), got 100000"},
		{"grad_accum", "name: x\nbase: {grad_accum: 70000}\n", "grad_accum must be a positive integer (at most 65536), got 70000"},
		{"global_batch", "name: x\nbase: {global_batch: 2147483648}\n", "global_batch must be a positive integer (at most 1073741824), got 2147483648"},
		{"seq_len", "name: x\nseq_len: 1000000000\n", "spec.yaml:2:10: seq_len must be a positive integer (at most 16777216), got 1000000000"},
		{"steps written as a float", "name: x\nsteps: 1e12\n", "spec.yaml:2:8: steps must be a positive integer (at most 1000000), got 1e12"},
		{"warmup_steps", "name: x\nwarmup_steps: 2000000\n", "warmup_steps must be an integer from 0 to 1000000, got 2000000"},
		{"repeats", "name: x\nrepeats: 100000000\n", "spec.yaml:2:10: repeats must be a positive integer (at most 1000), got 100000000"},
		{"seed too large", "name: x\nseed: 4294967296\n", "seed must be an integer from 0 to 4294967295, got 4294967296"},
		{"negative seed", "name: x\nseed: -1\n", "seed must be an integer from 0 to 4294967295, got -1"},
		{"timeout", "name: x\ntimeout: 1000h\n", `spec.yaml:2:10: timeout must be a positive Go duration such as 30m, 90s or 1h30m, at most 720h (30 days), got "1000h"`},
		{"derived world_size", "name: x\nbase: {nodes: 16384, gpus_per_node: 1024}\n", "spec.yaml:2:15: world_size would be 16777216, more than 131072; use smaller values"},
		{"derived global_batch", "name: x\nbase: {world_size: 131072, batch_per_device: 65536}\n", "global_batch would be 8589934592, more than 1073741824"},
		{"derived grad_accum", "name: x\nbase: {global_batch: 1073741824}\n", "grad_accum would be 1073741824, more than 65536"},
		{"the bound in --set too", "name: x\n", "--set:1:9: seq_len must be a positive integer (at most 16777216), got 1000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts Options
			if strings.HasPrefix(tc.name, "the bound in --set") {
				opts.Set = []string{"seq_len=1000000000"}
			}
			_, err := Parse([]byte(tc.spec), "spec.yaml", opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestWholeFloats is issue 13 §7: `2048.0` was refused as "got the number 2048".
// A whole number written as a float is that integer; a fraction is refused with
// what was written.
func TestWholeFloats(t *testing.T) {
	plain, err := Parse([]byte("name: x\nseq_len: 2048\nsteps: 1000\n"), "a.yaml", Options{})
	require.NoError(t, err)
	for _, spec := range []string{"name: x\nseq_len: 2048.0\nsteps: 1e3\n", "name: x\nseq_len: 2.048e3\nsteps: 1000.00\n"} {
		plan, err := Parse([]byte(spec), "b.yaml", Options{})
		require.NoError(t, err, spec)
		assert.Equal(t, 2048, plan.Runs[0].SeqLen)
		assert.Equal(t, 1000, plan.Runs[0].Steps)
		assert.Equal(t, plain.Runs[0].ID, plan.Runs[0].ID)
		again, err := Parse(plan.Resolved, "resolved.yaml", Options{})
		require.NoError(t, err, "%s", plan.Resolved)
		assert.Equal(t, plan.Runs[0].ID, again.Runs[0].ID)
	}
	viaSet, err := Parse([]byte("name: x\n"), "c.yaml", Options{Set: []string{"seq_len=2048.0"}})
	require.NoError(t, err)
	assert.Equal(t, 2048, viaSet.Runs[0].SeqLen)

	for _, tc := range []struct{ spec, want string }{
		{"name: x\nseq_len: 2048.5\n", "x.yaml:2:10: seq_len must be a positive integer (at most 16777216), got the number 2048.5"},
		{"name: x\nseq_len: 1e999\n", "got the number 1e999"},
		{"name: x\nseq_len: .nan\n", "got the number .nan"},
	} {
		_, err := Parse([]byte(tc.spec), "x.yaml", Options{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// TestByteOrderMark is issue 13 §7: a spec saved with a UTF-8 BOM gave
// `unknown key "\ufeffname"`.
func TestByteOrderMark(t *testing.T) {
	plan, err := Parse([]byte("\ufeffname: bom\nseq_len: 64\n"), "bom.yaml", Options{})
	require.NoError(t, err)
	assert.Equal(t, "bom", plan.Name)
	assert.Equal(t, 64, plan.Runs[0].SeqLen)
}

// TestErrorsDoNotEchoInput is issue 13 §7: errors repeated kilobytes of binary
// input. A message quotes at most a short, escaped prefix.
func TestErrorsDoNotEchoInput(t *testing.T) {
	// UTF-8 (a byte that is not is refused before anything quotes the value,
	// issue 37; checked below).
	junk := strings.Repeat("\x01\x02\u00fe", 3000)
	for _, spec := range []string{
		"name: x\n\"" + strings.Repeat("k", 5000) + "\": 1\n",
		"name: x\nbase: {sharding: \"" + junk + "\"}\n",
		"name: x\nmodel: 12\nbase: {mixed_precision: " + strings.Repeat("z", 5000) + "}\n",
		"name: x\ntimeout: \"" + strings.Repeat("9", 5000) + "\"\n",
	} {
		_, err := Parse([]byte(spec), "x.yaml", Options{})
		require.Error(t, err)
		assert.Less(t, len(err.Error()), 600, "%s", err)
		assert.NotContains(t, err.Error(), "\x01")
		assert.Contains(t, err.Error(), "bytes in all")
	}
	_, err := Parse([]byte("name: x\nbase: {sharding: \""+strings.Repeat("\x01\x02\xfe", 3000)+"\"}\n"), "x.yaml", Options{})
	require.Error(t, err)
	assert.Equal(t, "x.yaml:2:21: byte 0xfe is not UTF-8; a spec is UTF-8 text (save the file as UTF-8, or write the character as a \\u escape in a double-quoted string)", err.Error())
}

// TestHostileSpecsRefusedCheaply is issue 13 §3: a 100 KB spec of nested `[`
// took 15 GB and 30 s to be refused, an alias bomb grew ×9 per level, and
// /dev/zero or a FIFO given as the spec never returned.
func TestHostileSpecsRefusedCheaply(t *testing.T) {
	bomb := aliasBombSpec
	for _, tc := range []struct{ name, spec, want string }{
		{"100 KB of nested brackets", "name: x\nseq_len: " + strings.Repeat("[", 100_000) + "\n", "spec.yaml:2:41: the sweep spec nests lists and mappings deeper than 32 levels"},
		{"alias bomb", bomb, "spec.yaml:8:17: the sweep spec expands to more than 200000 values once its aliases (*name) are expanded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := Parse([]byte(tc.spec), "spec.yaml", Options{})
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			var se *SpecError
			assert.True(t, errors.As(err, &se))
			assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20))
			assert.Less(t, took, 5*time.Second)
		})
	}

	dir := t.TempDir()
	fifo := filepath.Join(dir, "spec.yaml")
	require.NoError(t, mkfifo(fifo))
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte("name: x\n"+strings.Repeat("# padding\n", 30_000)), 0o644))
	for _, tc := range []struct{ path, want string }{
		{"/dev/zero", "a sweep spec must be a regular file, but this is a character device"},
		{fifo, "a sweep spec must be a regular file, but this is a FIFO"},
		{big, "more than the 256.0 KiB a sweep spec may have"},
	} {
		done := make(chan error, 1)
		go func() { _, err := Load(tc.path, Options{}); done <- err }()
		select {
		case err := <-done:
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		case <-time.After(10 * time.Second):
			t.Fatalf("Load(%s) hangs", tc.path)
		}
	}
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }

// TestDurationJSONBounded: a run_args.json timeout of 1e300 seconds overflowed
// time.Duration into garbage; it is an error now.
func TestDurationJSONBounded(t *testing.T) {
	var d Duration
	require.NoError(t, d.UnmarshalJSON([]byte(`90`)))
	assert.Equal(t, Duration(90*time.Second), d)
	for _, in := range []string{`1e300`, `-1e300`} {
		err := d.UnmarshalJSON([]byte(in))
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), "out of range")
	}
}

// TestExcludeWorkBounded: 2,000 exclude entries over a million-point grid (a
// 70 KB spec) took a minute to expand; the work is bounded and refused at once.
func TestExcludeWorkBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: x\ngrid:\n  seed: [")
	for i := range 1024 {
		b.WriteString(strconv.Itoa(i) + ", ")
	}
	b.WriteString("]\n  seq_len: [")
	for i := range 1024 {
		b.WriteString(strconv.Itoa(i+1) + ", ")
	}
	b.WriteString("]\nexclude:\n")
	for i := range 2000 {
		b.WriteString("  - {seed: " + strconv.Itoa(i) + ", seq_len: 5000}\n")
	}
	start := time.Now()
	_, err := Parse([]byte(b.String()), "x.yaml", Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exclude has 2000 entries over a grid of 1048576 points, more than 67108864 checks")
	assert.Less(t, time.Since(start), 10*time.Second)
}
