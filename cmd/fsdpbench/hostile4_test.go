package main

// Round four of hostile input (issue 39): a job script's #SBATCH lines, the
// results directory's path, calibrate's output path.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const hostile4Spec = `name: h4
backend: sim
hardware: h100-sxm
model: tiny
seq_len: 64
steps: 3
grid:
  world_size: [1, 2]
`

// TestSBatchLineBreakIsASpecError: launcher_options.sbatch ["--comment=x\ntouch
// FILE", "--exclusive"] rendered "touch FILE" as a command of the job script; and
// launcher_options.mem=abc failed only at submit time. Both are spec errors at
// load, exit 2, naming the key, whatever the launcher, before anything is written.
func TestSBatchLineBreakIsASpecError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct{ opts, want string }{
		{`{sbatch: ["--comment=x\ntouch FILE", "--exclusive"]}`,
			`launcher_options.sbatch: item 0 "--comment=x\ntouch FILE" holds a line break: each item is one #SBATCH line`},
		{`{mem: abc}`, `launcher_options.mem: "abc" is not a Slurm memory size`},
	} {
		spec := writeSpec(t, dir, hostile4Spec+"launcher_options: "+tc.opts+"\n")
		for _, args := range [][]string{{"sweep", spec, "--results", "out"}, {"sweep", spec, "--dry-run", "--results", "out"}, {"plan", spec}} {
			res := fsdpbench(t, dir, args...)
			assert.Equal(t, ExitUsage, res.code, "%v: %s", args, res.stderr)
			assert.Contains(t, res.stderr, tc.want, args)
			assert.Empty(t, res.stdout, args)
		}
	}
	assert.NoDirExists(t, filepath.Join(dir, "out"))
	assert.NoFileExists(t, filepath.Join(dir, "FILE"))
}

// pathOfLength is an absolute path under base of exactly n bytes, made of folder
// names of 200 bytes (a name may have 255), that does not exist.
func pathOfLength(t *testing.T, base string, n int) string {
	t.Helper()
	p := base
	for len(p)+1+200 < n {
		p = filepath.Join(p, strings.Repeat("d", 200))
	}
	p = filepath.Join(p, strings.Repeat("e", n-len(p)-1))
	require.Len(t, p, n)
	return p
}

// TestResultsPathTooLongIsRefusedOnce: a --results under which a run's files pass
// PATH_MAX made every run fail on its own (exit 1, 21 KB of stderr for 2 runs; 50
// KB for more), and one past PATH_MAX itself printed its 4 KB path twice. Both are
// refused once, before anything runs or is made: exit 2, a few hundred bytes
// naming the bound and the longest path that fits.
func TestResultsPathTooLongIsRefusedOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, hostile4Spec)
	for _, n := range []int{4040, 4096, 5000} {
		long := pathOfLength(t, dir, n)
		for _, args := range [][]string{{"sweep", spec}, {"sweep", spec, "--dry-run"}} {
			res := fsdpbench(t, dir, append(args, "--results", long)...)
			assert.Equal(t, ExitUsage, res.code, "%d %v: %s", n, args, res.stderr)
			assert.Contains(t, res.stderr, "is too long: a run's files would lie ")
			assert.Contains(t, res.stderr, "past the system's limit of 4095 bytes for a path (PATH_MAX); give a results directory of at most ")
			assert.Less(t, len(res.stderr), 1000, "refused once, the path cut: %s", res.stderr)
			assert.Equal(t, 1, strings.Count(res.stderr, "\n"), res.stderr)
			assert.Empty(t, res.stdout)
		}
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotEqual(t, strings.Repeat("d", 200), e.Name(), "nothing was made")
	}
	// A folder name past NAME_MAX is named too.
	res := fsdpbench(t, dir, "sweep", spec, "--results", strings.Repeat("n", 300))
	assert.Equal(t, ExitUsage, res.code, res.stderr)
	assert.Contains(t, res.stderr, "is 300 bytes long, past the system's limit of 255 (NAME_MAX)")

	// The longest path the message allows still runs.
	res = fsdpbench(t, dir, "sweep", spec, "--results", filepath.Join(dir, "short"), "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
}

// TestResultsSymlinkLoopIsNamed: --results a symbolic link that loops (or a path
// through one) said "mkdir loop: file exists"; it says "too many levels of
// symbolic links", as report does, naming the link, exit 2, for sweep, its
// dry run and ab.
func TestResultsSymlinkLoopIsNamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, hostile4Spec)
	require.NoError(t, os.Symlink("loop", filepath.Join(dir, "loop")))
	require.NoError(t, os.Symlink("b", filepath.Join(dir, "a")))
	require.NoError(t, os.Symlink("a", filepath.Join(dir, "b")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o644))
	for _, tc := range []struct{ results, want string }{
		{"loop", "--results loop: stat loop: too many levels of symbolic links (a symbolic link on the path leads back to itself: loop -> loop)"},
		{"loop/x", "--results loop/x: stat loop/x: too many levels of symbolic links (a symbolic link on the path leads back to itself: loop -> loop)"},
		{"a", "--results a: stat a: too many levels of symbolic links (a symbolic link on the path leads back to itself: a -> b)"},
		{"file", "--results file: is not a directory (a file)"},
		{"file/x", "--results file/x: file is a file, not a directory"},
	} {
		for _, args := range [][]string{
			{"sweep", spec}, {"sweep", spec, "--dry-run"},
			{"ab", spec, "--a", "batch_per_device=1", "--b", "batch_per_device=2", "--pairs", "6"},
		} {
			res := fsdpbench(t, dir, append(args, "--results", tc.results)...)
			assert.Equal(t, ExitUsage, res.code, "%v: %s", args, res.stderr)
			assert.Contains(t, res.stderr, tc.want, args)
			assert.NotContains(t, res.stderr, "file exists", args)
		}
	}
	// A sweep folder that loops under a good results directory is named too.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "res"), 0o755))
	require.NoError(t, os.Symlink("h4", filepath.Join(dir, "res", "h4")))
	res := fsdpbench(t, dir, "sweep", spec, "--results", "res")
	assert.Equal(t, ExitUsage, res.code, res.stderr)
	assert.Contains(t, res.stderr, "stat res/h4: too many levels of symbolic links (h4 is a symbolic link that leads back to itself: res/h4 -> h4)")
}

// TestCalibrateChecksItsOutputFirst: calibrate -o DIR was refused only after the
// whole fit (52 s for 98 runs). The output path is checked before the runs are
// read: a directory, a missing or unwritable directory, a link that loops, a
// misspelt --format are refused at once, exit 2, nothing fitted or printed.
func TestCalibrateChecksItsOutputFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	nights := []string{filepath.Join(root, "examples", "gate-noisy", "night1"), filepath.Join(root, "examples", "gate-noisy", "night2")}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "outdir"), 0o755))
	require.NoError(t, os.Symlink("loop", filepath.Join(dir, "loop")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "outdir"}, "-o: write outdir: is a directory; give a file name (such as outdir/out)"},
		{[]string{"-o", "nowhere/cal.json"}, "-o: write nowhere/cal.json: the directory nowhere does not exist (no such file or directory); create it or give another path"},
		{[]string{"-o", "file/cal.json"}, "-o: write file/cal.json: "},
		{[]string{"-o", "loop"}, "-o: write loop: is a symbolic link that loops (-> loop)"},
		{[]string{"--results", "file"}, "--results: write file/calibration.json: "},
		{[]string{"--format", "xml", "-o", "cal.json"}, `--format "xml": use table or json`},
	} {
		// An input that holds no usable run: the output's error comes first, so
		// nothing was read or fitted before it.
		for _, inputs := range [][]string{nights, {filepath.Join(dir, "outdir")}} {
			start := time.Now()
			res := fsdpbench(t, dir, append(append([]string{"calibrate"}, inputs...), tc.args...)...)
			assert.Equal(t, ExitUsage, res.code, "%v: %s", tc.args, res.stderr)
			assert.Contains(t, res.stderr, tc.want, tc.args)
			assert.NotContains(t, res.stderr, "none of the", "the output is checked before the runs are read")
			assert.Empty(t, res.stdout, "nothing fitted or printed")
			assert.Less(t, time.Since(start), 20*time.Second)
		}
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(dir, "ro")
		require.NoError(t, os.Mkdir(ro, 0o555))
		res := fsdpbench(t, dir, append(append([]string{"calibrate"}, nights...), "-o", filepath.Join(ro, "cal.json"))...)
		assert.Equal(t, ExitUsage, res.code, res.stderr)
		assert.Contains(t, res.stderr, "is not writable")
	}
	assert.NoFileExists(t, filepath.Join(dir, "cal.json"))

	// The same runs with a good path fit and write, and a dry run needs none.
	res := fsdpbench(t, dir, append(append([]string{"calibrate"}, nights...), "-o", filepath.Join(dir, "outdir", "cal.json"))...)
	require.Equal(t, 0, res.code, res.stderr)
	assert.FileExists(t, filepath.Join(dir, "outdir", "cal.json"))
	res = fsdpbench(t, dir, append(append([]string{"calibrate"}, nights...), "-o", "outdir", "--dry-run")...)
	require.Equal(t, 0, res.code, res.stderr)
}
