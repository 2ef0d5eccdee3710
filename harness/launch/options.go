package launch

import (
	"github.com/fsdpbench/fsdpbench/backends"
)

// CheckOptions validates a run's launcher_options for the launcher it runs on
// ("" is local). Only Slurm takes options; the local launcher ignores them, so
// that one spec can switch launchers (--set launcher=local), but they must still
// be Slurm's, well formed: a misspelt key is a mistake whichever launcher runs.
// Errors are *backends.SpecError values that name the key.
func CheckOptions(launcher string, opts map[string]any) error {
	switch launcher {
	case "", LocalName, SlurmName:
		_, err := ParseSlurmOptions(opts)
		return err
	}
	return backends.SpecErr(Check(launcher))
}
