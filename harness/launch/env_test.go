package launch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
)

// TestScriptExportsTheSpecEnvLiterally: the spec's variables are exported into
// the job script sorted and quoted so that the shell leaves them as they are
// ($ and quotes included), and srun passes the script's environment on.
func TestScriptExportsTheSpecEnvLiterally(t *testing.T) {
	rc, _ := shellRun(t, time.Minute)
	rc.Env = map[string]string{"PLAIN": "1", "ODD": `x $HOME 'q' "d" $(id)`, "EMPTY": ""}
	s := SlurmOptions{}.Script(rc, "shell", backends.JobSpec{TasksPerNode: 1, Argv: []string{"true"}}, "/tmp/run")
	assert.Contains(t, s, "export EMPTY=''\nexport ODD='x $HOME '\\''q'\\'' \"d\" $(id)'\nexport PLAIN=1\n")
	assert.Contains(t, s, "srun --export=ALL ")
}

// TestSlurmJobGetsTheSpecEnvUnderExportNone: a job submitted with
// --export=NONE still starts its tasks with the spec's variables, exactly.
func TestSlurmJobGetsTheSpecEnvUnderExportNone(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	be := &shellBackend{cmd: `printf 'probe=[%s] algo=[%s]\n' "$ENVAXES_PROBE" "$NCCL_ALGO"`}
	rc, env := shellRun(t, time.Minute)
	rc.Env = map[string]string{"ENVAXES_PROBE": `a b$HOME'c`, "NCCL_ALGO": "Tree"}
	rc.LauncherOptions = map[string]any{"poll_interval": "100ms", "sbatch": []any{"--export=NONE"}}
	res, err := NewSlurm().Run(context.Background(), be, rc, env, nil)
	require.NoError(t, err)
	require.Equal(t, results.StatusOK, res.Status, res.Error)
	assert.Contains(t, be.job.seen(), `stdout 0 probe=[a b$HOME'c] algo=[Tree]`)
	script, err := os.ReadFile(filepath.Join(env.RunDir, ScriptFile))
	require.NoError(t, err)
	assert.Contains(t, string(script), "#SBATCH --export=NONE")
}
