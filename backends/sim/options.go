package sim

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Options are the sim's backend_options. The zero value keeps the hardware profile's
// figures.
type Options struct {
	// InterNodeBusBW and IntraNodeBusBW override the profile's collective bus
	// bandwidths, in bytes/s (the spec gives GB/s, as nccl-tests reports busbw).
	InterNodeBusBW float64
	IntraNodeBusBW float64
	// Efficiency overrides the profile's fraction of peak FLOP/s reached.
	Efficiency float64
	// SleepPerStep makes Run sleep this long per simulated step and emit step events,
	// so the harness's progress, Ctrl-C and resume can be exercised with a backend
	// that is otherwise instant.
	SleepPerStep time.Duration
	// GradientAsBucketView is DDP's gradient_as_bucket_view: gradients live in the
	// all-reduce buckets instead of beside them (saves one gradient copy).
	GradientAsBucketView bool
}

// option describes one backend option: its name, what it takes and how to read it.
type option struct {
	help string
	set  func(o *Options, v any) error
}

var optionTable = map[string]option{
	"inter_node_bus_bw_gbps": {"bus bandwidth between nodes, GB/s (nccl-tests busbw), e.g. 3 for TCP, 25 for 200 Gb/s InfiniBand",
		func(o *Options, v any) error { return setPositive(&o.InterNodeBusBW, v, 1e9) }},
	"intra_node_bus_bw_gbps": {"bus bandwidth inside a node, GB/s (nccl-tests busbw)",
		func(o *Options, v any) error { return setPositive(&o.IntraNodeBusBW, v, 1e9) }},
	"efficiency": {"fraction of peak FLOP/s the step's compute reaches, in (0, 1]",
		func(o *Options, v any) error {
			f, err := number(v)
			if err != nil {
				return err
			}
			if !(f > 0 && f <= 1) {
				return fmt.Errorf("%v must be in (0, 1]", v)
			}
			o.Efficiency = f
			return nil
		}},
	"sleep_per_step": {"a Go duration (\"50ms\") to sleep per simulated step, emitting step events",
		func(o *Options, v any) error {
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("%v is not a duration: give a Go duration string such as \"50ms\" or \"1s\"", v)
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				return fmt.Errorf("%q is not a duration: give a Go duration such as \"50ms\" or \"1s\"", s)
			}
			if d < 0 {
				return fmt.Errorf("%q must not be negative", s)
			}
			o.SleepPerStep = d
			return nil
		}},
	"ddp_gradient_as_bucket_view": {"DDP's gradient_as_bucket_view (true saves a gradient copy); default false, as in PyTorch",
		func(o *Options, v any) error {
			b, ok := v.(bool)
			if !ok {
				return fmt.Errorf("%v must be true or false", v)
			}
			o.GradientAsBucketView = b
			return nil
		}},
}

// OptionNames lists the backend_options the sim accepts, sorted.
func OptionNames() []string {
	names := make([]string, 0, len(optionTable))
	for n := range optionTable {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ParseOptions reads and validates backend_options. Errors name the option, the
// bad value and what is accepted; an unknown option lists the known ones.
func ParseOptions(m map[string]any) (Options, error) {
	var o Options
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same error first on every run
	for _, k := range keys {
		opt, ok := optionTable[k]
		if !ok {
			msg := fmt.Sprintf("unknown sim backend option %q", k)
			if c := sweeps.Closest(k, OptionNames()); c != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", c)
			}
			return Options{}, fmt.Errorf("backend_options: %s; the sim accepts %s", msg, describeOptions())
		}
		if err := opt.set(&o, m[k]); err != nil {
			return Options{}, fmt.Errorf("backend_options.%s: %w (%s)", k, err, opt.help)
		}
	}
	return o, nil
}

func describeOptions() string {
	var parts []string
	for _, n := range OptionNames() {
		parts = append(parts, n+" ("+optionTable[n].help+")")
	}
	return strings.Join(parts, "; ")
}

// number reads a numeric option as YAML (int64, uint64, float64) or JSON (float64)
// decoders deliver it; a numeric string is accepted too, since --set passes strings.
func number(v any) (float64, error) {
	var f float64
	switch x := v.(type) {
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case uint64:
		f = float64(x)
	case float64:
		f = x
	case string:
		p, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", x)
		}
		f = p
	default:
		return 0, fmt.Errorf("%v is not a number", v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%v is not a finite number", v)
	}
	return f, nil
}

func setPositive(dst *float64, v any, scale float64) error {
	f, err := number(v)
	if err != nil {
		return err
	}
	if f <= 0 {
		return fmt.Errorf("%v must be positive", v)
	}
	*dst = f * scale
	return nil
}
