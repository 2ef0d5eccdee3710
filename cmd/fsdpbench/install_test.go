package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMakeInstall runs the README's install line, `make install`, as a newcomer's
// first build: every cgo package compiles afresh (a CGO_CFLAGS of this test's own
// makes Go's cache miss them, as on a fresh machine), and the build prints no
// compiler warning (go-nvml's ~150 lines of deprecation warnings came first);
// with -buildvcs=false (no VCS stamp) the installed binary still names its
// commit, from the Makefile's ldflags.
func TestMakeInstall(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): the Makefile has no commit to stamp", err)
	}
	gobin := t.TempDir()
	// The C compiler's flags are part of Go's cache key: a nonce define recompiles
	// every cgo package (go-nvml's too) instead of replaying a cached build.
	nonce := fmt.Sprintf("-O2 -g -DFSDPBENCH_INSTALL_TEST=%d", time.Now().UnixNano())
	cmd := exec.Command("make", "-s", "-C", root, "install", "GOBIN="+gobin, "CGO_CFLAGS="+nonce)
	cmd.Env = append(withoutVar(withoutVar(os.Environ(), "GOFLAGS"), "MAKEFLAGS"), "GOFLAGS=-buildvcs=false")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "make install: %s%s", stdout.String(), stderr.String())
	assert.Empty(t, stderr.String(), "make install prints no warnings")
	installed := filepath.Join(gobin, "fsdpbench")
	assert.Equal(t, "installed "+installed, strings.Split(strings.TrimSpace(stdout.String()), "\n")[0])
	assert.LessOrEqual(t, strings.Count(stdout.String(), "\n"), 2, "install says where, and how to reach it: %s", stdout.String())

	out, err := exec.Command(installed, "version").Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "(commit "+strings.TrimSpace(string(head))+",", "version names the commit built without a VCS stamp")
}
