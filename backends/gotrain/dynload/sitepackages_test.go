package dynload

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSitePackagesAsksTheInterpreter(t *testing.T) {
	dir := t.TempDir()
	want := filepath.Join(dir, "site-packages")
	globbed := filepath.Join(dir, "lib", "python3.99", "dist-packages")
	require.NoError(t, os.MkdirAll(want, 0o755))
	require.NoError(t, os.MkdirAll(globbed, 0o755))
	// A stand-in interpreter prints one real directory, one that does not
	// exist (dropped) and a duplicate (kept once).
	py := filepath.Join(dir, "python3")
	script := "#!/bin/sh\necho " + want + "\necho " + filepath.Join(dir, "gone") + "\necho " + want + "\n"
	require.NoError(t, os.WriteFile(py, []byte(script), 0o755))
	failing := filepath.Join(dir, "broken-python")
	require.NoError(t, os.WriteFile(failing, []byte("#!/bin/sh\nexit 3\n"), 0o755))

	got := sitePackages([]string{failing, py, filepath.Join(dir, "missing")}, []string{filepath.Join(dir, "lib", "python3*", "dist-packages")})
	assert.Equal(t, []string{want, globbed}, got)
}

func TestSitePackagesOfThisMachine(t *testing.T) {
	// Debian's python3 always reports its dist-packages; the result is
	// cached, so a second call must agree.
	got := SitePackages()
	require.NotEmpty(t, got, "python3 reported no site-packages")
	assert.Equal(t, got, SitePackages())
}
