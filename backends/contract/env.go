package contract

import (
	"slices"
	"strings"

	"maps"
)

// EnvSpecEnv names, comma-separated, the variables the spec gave the run
// (RunConfig.Env), so a rank can record what it received of them.
const EnvSpecEnv = "FSDPBENCH_SPEC_ENV"

// Received returns, for each variable the spec gave (env), the value getenv
// sees in this process: what a rank records as its spec_env.
func Received(env map[string]string, getenv func(string) string) map[string]string {
	if len(env) == 0 {
		return nil
	}
	out := make(map[string]string, len(env))
	for k := range env {
		out[k] = getenv(k)
	}
	return out
}

// WithEnv returns environ (KEY=VALUE entries, as os.Environ gives them) with
// the run's variables from the spec (RunConfig.Env) put on top: an inherited
// entry of the same name is replaced, the others kept, so every process of the
// run sees the spec's value whichever entry a program reads first. The spec's
// variables come last, sorted by name. environ is not modified.
func WithEnv(environ []string, env map[string]string) []string {
	if len(env) == 0 {
		return environ
	}
	out := make([]string, 0, len(environ)+len(env))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if _, given := env[name]; !given {
			out = append(out, kv)
		}
	}
	names := slices.Collect(maps.Keys(env))
	slices.Sort(names)
	for _, k := range names {
		out = append(out, k+"="+env[k])
	}
	return out
}
