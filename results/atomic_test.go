//go:build unix

package results

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteFileAtomicFollowsTheUmask: results files get 0666 less the umask, as
// logs do (they were 0600, unreadable to colleagues on a shared directory).
func TestWriteFileAtomicFollowsTheUmask(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, tt := range []struct {
		umask int
		want  os.FileMode
	}{{0o022, 0o644}, {0o002, 0o664}, {0o077, 0o600}} {
		syscall.Umask(tt.umask)
		path := filepath.Join(t.TempDir(), "metrics.json")
		require.NoError(t, WriteFileAtomic(path, []byte("{}\n")))
		st, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, tt.want, st.Mode().Perm(), "umask %o", tt.umask)
	}
}

// TestWriteFileAtomicErrorNamesTheFile: a failed write names the file asked for,
// never the temporary file beside it, and leaves no temporary file behind.
func TestWriteFileAtomicErrorNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "x.csv")
	require.NoError(t, os.Mkdir(target, 0o755)) // a directory where the file goes: the rename fails
	require.NoError(t, os.WriteFile(filepath.Join(target, "keep"), nil, 0o644))
	err := WriteFileAtomic(target, []byte("a,b\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "write "+target+": ")
	assert.NotContains(t, err.Error(), ".tmp")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "the temporary file was removed")

	err = WriteFileAtomic(filepath.Join(dir, "missing", "y.csv"), nil)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), ".tmp")
}
