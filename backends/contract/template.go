// Package contract is what fsdpbench and a training script it launches agree on,
// whatever launches it (the torchrun backend, the exec plugin): argument templates
// that map a run's axes onto the script's own flags, the per-rank metrics files the
// script writes to $FSDPBENCH_METRICS_DIR, and the "FSDPBENCH {json}" step lines it
// prints. README: "Your own PyTorch script under the torchrun backend".
package contract

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Paths are the files and directories of one run that a script may be told about.
type Paths struct {
	RunDir     string // the run's directory (results layout)
	MetricsDir string // where the metrics contract's rank-<r>.json files go
	OutputDir  string // the script's working directory, for its own outputs
	ModelJSON  string // the model's shape as JSON (the project's script reads it)
}

// Vars are the values an argument template can name: every axis of the run under
// its canonical name, the measurement settings, and the run's paths. Booleans are
// "true"/"false"; lists are not axes, so every value is one word.
func Vars(rc sweeps.RunConfig, p Paths) map[string]string {
	b := strconv.FormatBool
	i := strconv.Itoa
	return map[string]string{
		"model":                    rc.Model,
		"seq_len":                  i(rc.SeqLen),
		"steps":                    i(rc.Steps),
		"warmup_steps":             i(rc.WarmupSteps),
		"total_steps":              i(rc.WarmupSteps + rc.Steps),
		"seed":                     strconv.FormatInt(rc.Seed, 10),
		"hardware":                 rc.Hardware,
		"nodes":                    i(rc.Nodes),
		"gpus_per_node":            i(rc.GPUsPerNode),
		"world_size":               i(rc.WorldSize),
		"batch_per_device":         i(rc.BatchPerDevice),
		"grad_accum":               i(max(rc.GradAccum, 1)),
		"global_batch":             i(rc.GlobalBatch),
		"sharding":                 rc.Sharding,
		"sharding_upper":           strings.ToUpper(rc.Sharding), // FULL_SHARD, as FSDP1 and accelerate spell it
		"activation_checkpointing": b(rc.ActivationCheckpointing),
		"backward_prefetch":        rc.BackwardPrefetch,
		"forward_prefetch":         b(rc.ForwardPrefetch),
		"cpu_offload":              b(rc.CPUOffload),
		"mixed_precision":          rc.MixedPrecision,
		"bf16":                     b(rc.MixedPrecision == sweeps.BF16),
		"fp16":                     b(rc.MixedPrecision == sweeps.FP16),
		"fsdp":                     b(rc.Sharding != sweeps.DDP),
		"wrap_policy":              rc.WrapPolicy,
		"compile":                  b(rc.Compile),
		"checkpoint":               checkpointKind(rc),
		"checkpoint_every":         i(rc.CheckpointEvery),
		"resume_check":             b(rc.ResumeCheck),
		"checkpoint_dir":           filepath.Join(p.RunDir, CheckpointDir),
		"run_id":                   rc.ID,
		"run_dir":                  p.RunDir,
		"metrics_dir":              p.MetricsDir,
		"output_dir":               p.OutputDir,
		"model_json":               p.ModelJSON,
	}
}

// Expand fills an argument template. Each element is one argument (never split, no
// shell), where
//
//	{name}        is replaced by the value of name (see Vars)
//	{name?text}   is text when name is "true", and nothing otherwise
//	{{ and }}     are literal braces
//
// An element that a {name?text} made empty is dropped, so a store_true flag is
// written "{activation_checkpointing?--gradient_checkpointing}". where names the
// template in errors (e.g. "backend_options.args").
func Expand(where string, tmpl []string, vars map[string]string) ([]string, error) {
	return ExpandLists(where, tmpl, vars, nil)
}

// ExpandLists is Expand where an element that is exactly {name}, for a name of
// lists, becomes that list's elements, each one argument as it is: a launcher's
// command template takes the script's whole argument list as "{script_args}"
// without any splitting at spaces or shell. A list's name is not a placeholder
// anywhere else.
func ExpandLists(where string, tmpl []string, vars map[string]string, lists map[string][]string) ([]string, error) {
	out := make([]string, 0, len(tmpl))
	for i, el := range tmpl {
		if len(el) > 2 && el[0] == '{' && el[len(el)-1] == '}' {
			if list, ok := lists[el[1:len(el)-1]]; ok {
				out = append(out, list...)
				continue
			}
		}
		s, conditional, err := expandOne(el, vars)
		if err != nil {
			return nil, fmt.Errorf("%s[%d] %q: %w", where, i, clipTemplate(el), err)
		}
		if s == "" && conditional {
			continue
		}
		if err := checkArg(s); err != nil {
			return nil, fmt.Errorf("%s[%d] %q: %w", where, i, clipTemplate(el), err)
		}
		out = append(out, s)
	}
	return out, nil
}

// MaxArgBytes is the longest single argument Linux passes to a program
// (MAX_ARG_STRLEN, 32 pages, less the terminating NUL): execve fails on a longer
// one, and only when the run starts.
const MaxArgBytes = 32*4096 - 1

// checkArg refuses an expanded argument no program can receive, so that Validate
// (preflight) says so with the template's position instead of the run failing
// at start with "argument list too long" or "invalid argument".
func checkArg(s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Errorf("byte %d is a NUL, which no program argument can hold; remove it", i+1)
	}
	if len(s) > MaxArgBytes {
		return fmt.Errorf("expands to %d bytes, more than the %d one argument may hold on Linux; pass it in a file instead", len(s), MaxArgBytes)
	}
	return nil
}

// clipTemplate shortens a template element quoted in an error.
func clipTemplate(el string) string {
	if len(el) > 80 {
		return el[:60] + "…"
	}
	return el
}

func expandOne(el string, vars map[string]string) (string, bool, error) {
	var sb strings.Builder
	conditional := false
	for i := 0; i < len(el); i++ {
		c := el[i]
		switch {
		case c == '{' && i+1 < len(el) && el[i+1] == '{':
			sb.WriteByte('{')
			i++
		case c == '}' && i+1 < len(el) && el[i+1] == '}':
			sb.WriteByte('}')
			i++
		case c == '}':
			return "", false, fmt.Errorf("column %d: unmatched '}' (write '}}' for a literal brace)", i+1)
		case c == '{':
			end := strings.IndexByte(el[i:], '}')
			if end < 0 {
				return "", false, fmt.Errorf("column %d: '{' is never closed (write '{{' for a literal brace)", i+1)
			}
			body := el[i+1 : i+end]
			name, text, isCond := strings.Cut(body, "?")
			v, ok := vars[name]
			if !ok {
				return "", false, unknownVar(name, i+1, vars)
			}
			if isCond {
				conditional = true
				switch v {
				case "true":
					sb.WriteString(text)
				case "false":
				default:
					return "", false, fmt.Errorf("column %d: {%s?...} needs a boolean, and %s is %q", i+1, name, name, v)
				}
			} else {
				sb.WriteString(v)
			}
			i += end
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String(), conditional, nil
}

func unknownVar(name string, col int, vars map[string]string) error {
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	sort.Strings(names)
	hint := ""
	if c := sweeps.Closest(name, names); c != "" {
		hint = fmt.Sprintf(" (did you mean {%s}?)", c)
	}
	return fmt.Errorf("column %d: unknown placeholder {%s}%s; known: %s", col, name, hint, strings.Join(names, ", "))
}
