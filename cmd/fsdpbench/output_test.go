//go:build unix

package main

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outputCommands are the commands that write an output file, each with the
// output path put last in its arguments.
func outputCommands(t *testing.T, dir string) map[string][]string {
	base := writeGateTree(t, filepath.Join(dir, "base"), okSpecs)
	same := writeGateTree(t, filepath.Join(dir, "same"), okSpecs)
	return map[string][]string{
		"export -o":       {"export", base, "--format", "json", "-o"},
		"gate --junit":    {"gate", "--baseline", base, "--current", same, "--junit"},
		"gate --markdown": {"gate", "--baseline", base, "--current", same, "--markdown"},
		"calibrate -o":    {"calibrate", base, "-o"},
	}
}

// TestOutputFlagsWriteThroughDevicesFIFOsAndLinks: an output flag writes what the
// path names, never replaces it. A FIFO's reader gets the bytes (it got none: the
// FIFO was replaced by a file), a character device stays a device, a symbolic link
// stays a link and its target is written (the link was replaced, the target never
// written).
func TestOutputFlagsWriteThroughDevicesFIFOsAndLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, args := range outputCommands(t, dir) {
		t.Run(name, func(t *testing.T) {
			sub := t.TempDir()

			fifo := filepath.Join(sub, "fifo")
			require.NoError(t, syscall.Mkfifo(fifo, 0o644))
			got := make(chan []byte, 1)
			go func() {
				f, err := os.Open(fifo) // blocks until the command opens it for writing
				if err != nil {
					got <- nil
					return
				}
				b, _ := io.ReadAll(f)
				f.Close()
				got <- b
			}()
			r := cli(t, append(args, fifo)...)
			assert.Equal(t, 0, r.code, r.stderr)
			if r.code != 0 {
				// Unblock the reader, which waits for a writer that never came.
				if f, err := os.OpenFile(fifo, os.O_WRONLY|os.O_APPEND, 0); err == nil {
					f.Close()
				}
			}
			select {
			case b := <-got:
				assert.NotEmpty(t, b, "the FIFO's reader got the output")
			case <-time.After(20 * time.Second):
				// The FIFO was replaced: its reader waits for a writer no path reaches.
				t.Error("the FIFO's reader got nothing in 20 s")
			}
			st, err := os.Lstat(fifo)
			require.NoError(t, err)
			assert.NotZero(t, st.Mode()&os.ModeNamedPipe, "still a FIFO: %v", st.Mode())

			target := filepath.Join(sub, "target.out")
			require.NoError(t, os.WriteFile(target, []byte("old"), 0o640))
			link := filepath.Join(sub, "link.out")
			require.NoError(t, os.Symlink("target.out", link))
			r = cli(t, append(args, link)...)
			assert.Equal(t, 0, r.code, r.stderr)
			st, err = os.Lstat(link)
			require.NoError(t, err)
			assert.NotZero(t, st.Mode()&os.ModeSymlink, "still a link: %v", st.Mode())
			b, err := os.ReadFile(target)
			require.NoError(t, err)
			assert.Greater(t, len(b), 10, "the link's target was written")
			st, err = os.Stat(target)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o640), st.Mode().Perm(), "the file replaced keeps its mode")

			// A character device: a copy of /dev/null where the test may make one, so
			// that a regression run as root cannot replace the machine's /dev/null.
			null := "/dev/null"
			if os.Geteuid() == 0 {
				null = filepath.Join(sub, "null")
				require.NoError(t, syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3))
			}
			r = cli(t, append(args, null)...)
			assert.Equal(t, 0, r.code, r.stderr)
			st, err = os.Lstat(null)
			require.NoError(t, err)
			assert.NotZero(t, st.Mode()&os.ModeCharDevice, "still a character device: %v", st.Mode())
		})
	}
}

// TestOutputFlagsRefuseWhatTheyCannotWrite: a directory, a link that leads nowhere
// or loops, and a missing directory are refused with a message saying which, and
// with the same exit code (usage, 2) in every command (export exited 1 where gate
// exited 2).
func TestOutputFlagsRefuseWhatTheyCannotWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	isDir := filepath.Join(dir, "isdir")
	require.NoError(t, os.Mkdir(isDir, 0o755))
	dangling := filepath.Join(dir, "dangling")
	require.NoError(t, os.Symlink("nowhere/x", dangling))
	loop := filepath.Join(dir, "loop")
	require.NoError(t, os.Symlink("loop", loop))
	for name, args := range outputCommands(t, dir) {
		for _, tt := range []struct{ path, want string }{
			{isDir, "is a directory"},
			{dangling, "is a symbolic link that leads to nothing"},
			{loop, "is a symbolic link that loops"},
			{filepath.Join(dir, "missing", "x"), "no such file or directory"},
		} {
			r := cli(t, append(args, tt.path)...)
			assert.Equal(t, ExitUsage, r.code, "%s %s: %s", name, tt.path, r.stderr)
			assert.Contains(t, r.stderr, tt.want, name)
			assert.Contains(t, r.stderr, tt.path, name)
		}
		st, err := os.Lstat(dangling)
		require.NoError(t, err)
		assert.NotZero(t, st.Mode()&os.ModeSymlink, "%s: the dangling link is left as it was", name)
	}
}

// TestOutputDashIsStdout: - (and /dev/stdout) is the command's stdout; calibrate
// then prints its report on stderr, and gate refuses a second report on stdout.
func TestOutputDashIsStdout(t *testing.T) {
	t.Parallel()
	cmds := outputCommands(t, t.TempDir())
	r := cli(t, append(cmds["calibrate -o"], "-")...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"version"`)
	assert.Contains(t, r.stderr, "leave-one-out")
	r = cli(t, append(cmds["export -o"], "/dev/stdout")...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"id"`)
	r = cli(t, append(cmds["gate --junit"], "-")...)
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "give --format junit instead")
}
