package launch

import (
	"sort"
	"strings"

	"github.com/fsdpbench/fsdpbench/backends"
)

// CheckOptions validates a run's launcher_options for the launcher it runs on
// ("" is local). The local launcher takes none, so any key there is a mistake
// (most likely options meant for launcher: slurm); errors are
// *backends.SpecError values that name the key.
func CheckOptions(launcher string, opts map[string]any) error {
	switch launcher {
	case "", LocalName:
		if len(opts) == 0 {
			return nil
		}
		keys := make([]string, 0, len(opts))
		for k := range opts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return backends.SpecErrorf("launcher_options.%s: the local launcher takes no options (launcher_options are for launcher: slurm: %s); remove launcher_options or set launcher: slurm",
			keys[0], strings.Join(slurmOptionKeys, ", "))
	case SlurmName:
		_, err := ParseSlurmOptions(opts)
		return err
	}
	return backends.SpecErr(Check(launcher))
}
