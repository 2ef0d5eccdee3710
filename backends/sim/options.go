package sim

import (
	"fmt"
	"sort"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
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
	// Calibration holds constants fitted to measured runs (`fsdpbench
	// calibrate`), applied per hardware profile; nil: the model's own.
	Calibration *Calibration
}

// option describes one backend option: its name, what it takes and how to read it.
type option struct {
	help string
	set  func(o *Options, v any) error
}

// Bounds of the options. A bus bandwidth above maxBusBWGBps (ten times NVLink 5's
// 1.8 TB/s) is a typo, and one below minBusBWGBps (10 MB/s) or an efficiency below
// minEfficiency predicts steps of centuries, past what the figures derived from
// them can hold (an efficiency of 1e-320 made tokens/s NaN). A simulated step
// sleeps at most maxSleepPerStep (a run that must last, for tests of cancellation).
const (
	minBusBWGBps    = 0.01
	maxBusBWGBps    = 20000
	minEfficiency   = 1e-3
	maxSleepPerStep = time.Hour
)

var optionTable = map[string]option{
	"inter_node_bus_bw_gbps": {"bus bandwidth between nodes, GB/s in [0.01, 20000] (nccl-tests busbw), e.g. 3 for TCP, 25 for 200 Gb/s InfiniBand",
		func(o *Options, v any) error { return setBusBW(&o.InterNodeBusBW, v) }},
	"intra_node_bus_bw_gbps": {"bus bandwidth inside a node, GB/s in [0.01, 20000] (nccl-tests busbw)",
		func(o *Options, v any) error { return setBusBW(&o.IntraNodeBusBW, v) }},
	"efficiency": {"fraction of peak FLOP/s the step's compute reaches, in [0.001, 1]",
		func(o *Options, v any) error {
			f, err := backends.NumberIn(v, minEfficiency, 1, false)
			o.Efficiency = f
			return err
		}},
	"sleep_per_step": {"a Go duration (\"50ms\", at most 1h) to sleep per simulated step, emitting step events",
		func(o *Options, v any) error {
			d, err := backends.DurationIn(v, 0, maxSleepPerStep)
			o.SleepPerStep = d
			return err
		}},
	"calibration": {"path of a calibration file written by `fsdpbench calibrate` (its constants for the run's hardware apply)",
		func(o *Options, v any) error {
			path, ok := v.(string)
			if !ok || path == "" {
				return fmt.Errorf("%v is not a file path", v)
			}
			c, err := LoadCalibration(path)
			o.Calibration = c
			return err
		}},
	"ddp_gradient_as_bucket_view": {"DDP's gradient_as_bucket_view (true saves a gradient copy); default false, as in PyTorch",
		func(o *Options, v any) error {
			b, err := backends.Bool(v)
			o.GradientAsBucketView = b
			return err
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

// ParseOptions reads and validates backend_options. Errors are
// *backends.SpecError values that name the option, the bad value and what is
// accepted; an unknown option suggests the closest known one and lists them.
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
			return Options{}, backends.UnknownOption("backend_options", "the sim backend", k, OptionNames())
		}
		if err := opt.set(&o, m[k]); err != nil {
			return Options{}, backends.SpecErrorf("backend_options.%s: %w (%s)", k, err, opt.help)
		}
	}
	return o, nil
}

func setBusBW(dst *float64, v any) error {
	f, err := backends.NumberIn(v, minBusBWGBps, maxBusBWGBps, false)
	*dst = f * 1e9
	return err
}
