package input

import (
	"errors"
	"io/fs"
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

// aliasBomb is a YAML document of about 400 bytes whose aliases expand to 9^8 values
// (the "billion laughs" shape).
func aliasBomb(prefix string) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString("  - &a0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 8; i++ {
		b.WriteString("  - &a" + strconv.Itoa(i) + " [")
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + strconv.Itoa(i-1))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.yaml")
	require.NoError(t, os.WriteFile(small, []byte("name: x\n"), 0o644))
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, make([]byte, 2048), 0o644))
	link := filepath.Join(dir, "link.json")
	require.NoError(t, os.Symlink(small, link))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	lim := Limits{What: "sweep spec", MaxBytes: 1024}

	for _, tc := range []struct {
		name, path string
		want       string // substring of the error; "" = reads
	}{
		{"regular file", small, ""},
		{"symlink to a regular file", link, ""},
		{"over the size", big, "the sweep spec is 2.0 KiB, more than the 1.0 KiB a sweep spec may have"},
		{"dev zero", "/dev/zero", "a sweep spec must be a regular file, but this is a character device"},
		{"fifo without a writer", fifo, "a sweep spec must be a regular file, but this is a FIFO (named pipe)"},
		{"directory", dir, "a sweep spec must be a regular file, but this is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var data []byte
			var err error
			go func() {
				defer close(done)
				data, err = ReadFile(tc.path, lim)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("ReadFile hangs")
			}
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, "name: x\n", string(data))
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), tc.path)
		})
	}

	_, err := ReadFile(filepath.Join(dir, "missing"), lim)
	assert.True(t, errors.Is(err, fs.ErrNotExist), "a missing file keeps fs.ErrNotExist: %v", err)
}

func TestCheckYAML(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		lim       Limits
		want      string // substring of the error; "" = accepted
	}{
		{"a plain spec", "name: x\ngrid:\n  world_size: [1, 2]\n  sharding: [full_shard, ddp]\n", Spec, ""},
		{"anchors within bounds", "name: x\nbase: &b {seq_len: 8}\ninclude: [*b, *b]\n", Spec, ""},
		{"nested brackets", "name: x\nseq_len: " + strings.Repeat("[", 100_000) + "\n", Spec,
			"fuzz.yaml:2:41: the sweep spec nests lists and mappings deeper than 32 levels"},
		{"nested block lists", "name: x\nbase: " + strings.Repeat("- ", 1000) + "x\n", Spec, "deeper than 32 levels"},
		{"nested block mappings", func() string {
			var b strings.Builder
			for i := range 40 {
				b.WriteString(strings.Repeat(" ", i) + "k:\n")
			}
			return b.String()
		}(), Spec, "deeper than 32 levels"},
		{"alias bomb", aliasBomb("rules:\n"), Rules, "fuzz.yaml:7:10: the rules file expands to more than 100000 values once its aliases (*name) are expanded"},
		{"too many aliases", "a: &a 1\nb: [" + strings.Repeat("*a, ", 2000) + "]\n", Rules, "more than 1000 aliases"},
		{"a mapping with many keys", func() string {
			var b strings.Builder
			b.WriteString("backend_options:\n")
			for i := range 1100 {
				b.WriteString("  k" + strconv.Itoa(i) + ": 1\n")
			}
			return b.String()
		}(), Spec, "a mapping of the sweep spec has more than 1000 keys"},
		{"too many tokens", "l: [" + strings.Repeat("1,", 60_000) + "]\n", Spec, "more than 100000 YAML tokens"},
		{"too large", strings.Repeat("# comment\n", 30_000), Spec, "more than the 256.0 KiB a sweep spec may have"},
		{"malformed YAML is the caller's to report", "a: [1, 2\n", Spec, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckYAML("fuzz.yaml", []byte(tc.doc), tc.lim)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			var ie *Error
			assert.True(t, errors.As(err, &ie))
		})
	}
}

func TestCheckJSON(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      string
	}{
		{"an object", `{"a": [1, 2, {"b": null}]}`, ""},
		{"NaN is the caller's to report", `{"loss": NaN}`, ""},
		{"deep arrays", "\n  " + strings.Repeat("[", 100_000), "fuzz.json:2:67: the metrics file nests arrays and objects deeper than 64 levels"},
		{"deep objects", strings.Repeat(`{"a":`, 100), "deeper than 64 levels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckJSON("fuzz.json", []byte(tc.doc), Metrics)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestBombsCheap is the regression for issue 13 §3: a 100 KB spec of nested
// brackets took 15 GB and 30 s to be refused, a 1 KB alias bomb in a rules file
// 3.3 GB. Both must be refused in well under a second with a few MB.
func TestBombsCheap(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		lim  Limits
	}{
		{"100 KB of nested brackets", "name: x\nseq_len: " + strings.Repeat("[", 100_000) + "\n", Spec},
		{"alias bomb", aliasBomb("rules:\n"), Rules},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			err := CheckYAML("bomb.yaml", []byte(tc.doc), tc.lim)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			require.Error(t, err)
			allocated := after.TotalAlloc - before.TotalAlloc
			assert.Less(t, allocated, uint64(64<<20), "allocated %d bytes", allocated)
			assert.Less(t, took, 5*time.Second)
		})
	}
}

func TestQuote(t *testing.T) {
	assert.Equal(t, `"abc"`, Quote("abc", 10))
	assert.Equal(t, `"\x00\x01"`, Quote("\x00\x01", 10))
	long := strings.Repeat("\xff", 5000)
	q := Quote(long, 40)
	assert.Less(t, len(q), 200)
	assert.Contains(t, q, "(5000 bytes in all)")
	assert.Equal(t, `"héé"… (9 bytes in all)`, Quote("héééé", 3))
}
