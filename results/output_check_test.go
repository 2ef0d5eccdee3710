package results

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckOutputAgreesWithWriteOutput: CheckOutput, which calibrate runs before
// its fit, refuses what WriteOutput would refuse after it, with the same words,
// and passes what it would write; it writes nothing itself.
func TestCheckOutputAgreesWithWriteOutput(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	require.NoError(t, os.Mkdir(p("d"), 0o755))
	require.NoError(t, os.WriteFile(p("f"), []byte("old"), 0o644))
	require.NoError(t, os.Symlink("loop", p("loop")))
	require.NoError(t, os.Symlink("nowhere", p("dangling")))
	require.NoError(t, os.Symlink("f", p("tofile")))
	sock := filepath.Join(os.TempDir(), "fsdpbench-check-"+filepath.Base(dir)+".sock") // short: a socket path has 108 bytes
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer l.Close()

	// Refused by both, in the same words.
	for _, path := range []string{p("d"), p("loop"), p("dangling"), sock} {
		cerr := CheckOutput(path, false)
		werr := WriteOutput(path, []byte("x"), io.Discard)
		require.Error(t, cerr, path)
		require.Error(t, werr, path)
		assert.Equal(t, werr.Error(), cerr.Error(), path)
	}
	// Refused by both; CheckOutput says which directory.
	for path, want := range map[string]string{
		p("nodir/x.json"): "the directory " + p("nodir") + " does not exist",
		p("f/x.json"):     "not a directory",
		p("loop/x.json"):  "too many levels of symbolic links",
	} {
		assert.ErrorContains(t, CheckOutput(path, false), want, path)
		assert.Error(t, WriteOutput(path, []byte("x"), io.Discard), path)
	}
	// Missing folders the caller makes are fine under a writable one, not under a file.
	assert.NoError(t, CheckOutput(p("new/deeper/x.json"), true))
	assert.NoDirExists(t, p("new"), "nothing is made")
	assert.ErrorContains(t, CheckOutput(p("f/new/x.json"), true), "not a directory")

	// Written by both.
	for _, path := range []string{p("new.json"), p("f"), p("tofile"), "-", "/dev/stdout", "/dev/null"} {
		assert.NoError(t, CheckOutput(path, false), path)
	}
	b, err := os.ReadFile(p("f"))
	require.NoError(t, err)
	assert.Equal(t, "old", string(b), "CheckOutput writes nothing")
	assert.NoFileExists(t, p("new.json"))

	if os.Geteuid() != 0 { // root writes anywhere
		require.NoError(t, os.Mkdir(p("ro"), 0o555))
		assert.ErrorContains(t, CheckOutput(filepath.Join(p("ro"), "x.json"), false), "is not writable")
	}
}
