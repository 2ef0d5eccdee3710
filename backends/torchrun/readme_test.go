package torchrun

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// yamlBlock is a fenced YAML block of the README.
var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestREADMETorchrunExamples keeps the README's torchrun sections true: every
// backend_options of their YAML examples is accepted, its templates expand with
// a run's placeholders, and an example for nanoGPT (logs: iter, or a script
// under nanoGPT/) passes its flags as --key=value, the only form nanoGPT's
// configurator takes (the README showed "--batch_size {batch_per_device}").
func TestREADMETorchrunExamples(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	text := string(data)
	begin := strings.Index(text, "### Your own PyTorch script under the torchrun backend")
	end := strings.Index(text, "## Plugins")
	require.True(t, begin >= 0 && end > begin, "the README's torchrun sections")
	rc := runConfig(2, sweeps.DDP)
	vars := runVars(rc, validatePaths("/run"), "/src/nanoGPT/train.py")
	blocks, nano := 0, 0
	for _, m := range yamlBlock.FindAllStringSubmatch(text[begin:end], -1) {
		for _, doc := range strings.Split(m[1], "\n---\n") {
			var spec struct {
				BackendOptions map[string]any `yaml:"backend_options"`
			}
			require.NoError(t, yaml.Unmarshal([]byte(doc), &spec), doc)
			if spec.BackendOptions == nil {
				continue
			}
			blocks++
			o, err := ParseOptions(spec.BackendOptions)
			require.NoError(t, err, doc)
			args, err := contract.Expand("args", o.Args, vars)
			require.NoError(t, err, doc)
			if o.Launcher == LauncherCommand {
				_, err := CommandArgv(o, vars, nil, "train.py", args)
				require.NoError(t, err, doc)
			}
			if o.WorkingDir != "" {
				_, err := expandWorkingDir(o, vars)
				require.NoError(t, err, doc)
			}
			if (o.Logs != nil && o.Logs.Builtin == BuiltinIter) || strings.Contains(o.Script, "nanoGPT") {
				nano++
				for _, a := range o.Args {
					if strings.HasPrefix(a, "--") {
						assert.Contains(t, a, "=", "nanoGPT's configurator takes --key=value only, in:\n%s", doc)
					}
				}
			}
		}
	}
	assert.GreaterOrEqual(t, blocks, 4, "YAML examples with backend_options")
	assert.GreaterOrEqual(t, nano, 2, "nanoGPT examples")
}
