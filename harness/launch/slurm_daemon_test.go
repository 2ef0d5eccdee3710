package launch

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlurmNamesTheMissingDaemon submits a job with the real sbatch to a Slurm
// whose daemons are missing, through a slurm.conf of the test's own (SLURM_CONF):
// a controller that accepts connections (a listener of the test) but a munge
// socket where no munged runs, and a controller port where nothing listens. The
// error names the daemon and how to start it; it does not send the user to
// launcher_options, which sbatch's failure used to.
func TestSlurmNamesTheMissingDaemon(t *testing.T) {
	if _, err := exec.LookPath("sbatch"); err != nil {
		if os.Getenv("FSDPBENCH_REQUIRE_SLURM") == "1" {
			t.Fatal("FSDPBENCH_REQUIRE_SLURM=1 but sbatch is not on PATH (.ci/deps installs slurm-client)")
		}
		t.Skip("sbatch is not installed (slurm-client)")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sbatch")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\ntrue\n"), 0o755))
	conf := func(port int) {
		t.Helper()
		path := filepath.Join(dir, "slurm.conf")
		body := fmt.Sprintf(`ClusterName=fsdpbench-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=%d
AuthType=auth/munge
AuthInfo=socket=%s
NodeName=localhost CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES
`, port, filepath.Join(dir, "no-munged", "munge.socket.2"))
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		t.Setenv("SLURM_CONF", path)
	}

	t.Run("munged", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		conf(ln.Addr().(*net.TCPAddr).Port)
		_, err = submit(script)
		require.Error(t, err)
		var d *DaemonError
		require.True(t, errors.As(err, &d), "%v", err)
		assert.Equal(t, "sbatch", d.Command)
		t.Log(err)
		assert.Contains(t, err.Error(), "munged, the authentication daemon")
		assert.Contains(t, err.Error(), "is not running")
		assert.Contains(t, err.Error(), "Munge encode failed: Failed to access")
		assert.Contains(t, err.Error(), "systemctl start munge")
		assert.NotContains(t, err.Error(), "check launcher_options")
	})

	t.Run("slurmctld", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close()) // nothing listens there now
		conf(port)
		_, err = submit(script)
		require.Error(t, err)
		var d *DaemonError
		require.True(t, errors.As(err, &d), "%v", err)
		assert.Contains(t, err.Error(), "slurmctld, the Slurm controller, does not answer")
		assert.Contains(t, err.Error(), "Unable to contact slurm controller")
		assert.Contains(t, err.Error(), "scontrol ping")
		assert.NotContains(t, err.Error(), "check launcher_options")
	})
}
