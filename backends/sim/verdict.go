package sim

import (
	"fmt"
	"strings"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// NearLimit is the fraction of the device above which a point that fits is
// near the limit: within 10% of it, closer than the memory assumptions are
// sure of (one of them changes a peak by more), so its verdict says which
// assumptions would turn it.
const NearLimit = 0.9

// alternative is one memory assumption the sim makes that the run config does
// not say, with the values it can take.
type alternative struct {
	// name is the backend option, as the verdict names it ("loss upcast").
	name string
	// current is the value the prediction used; values are all of them.
	current func(p point) string
	values  []string
	// applies says whether the assumption changes anything for the point.
	applies func(p point, strategy string) bool
	// set puts a value into the options.
	set func(o *Options, v string)
}

func sharded(strategy string) bool {
	return strategy == sweeps.FullShard || strategy == sweeps.HybridShard || strategy == sweeps.ShardGradOp
}

// alternatives are the memory assumptions a verdict may rest on, in the order
// the verdict names them (the ones most often left unsaid first). Dropout and
// the reserved factor are left out: the first is a fact about the model the
// user knows, the second a measured figure, not a choice of implementation.
var alternatives = []alternative{
	{name: "loss", values: []string{LossUpcast, LossFused, LossChunked},
		current: func(p point) string { return p.as.Loss },
		applies: func(point, string) bool { return true },
		set:     func(o *Options, v string) { o.Loss = v }},
	{name: "checkpointing", values: []string{CheckpointFull, CheckpointSelective},
		current: func(p point) string { return p.as.Checkpointing },
		applies: func(p point, _ string) bool { return p.rc.ActivationCheckpointing },
		set:     func(o *Options, v string) { o.Checkpointing = v }},
	{name: "attention", values: []string{AttentionFlash, AttentionMath, AttentionEager},
		current: func(p point) string { return p.as.attention(p) },
		applies: func(point, string) bool { return true },
		set:     func(o *Options, v string) { o.Attention = v }},
	{name: "grad_sync", values: []string{GradSyncEveryMicroStep, GradSyncNoSync},
		current: func(p point) string { return p.as.GradSync },
		applies: func(p point, s string) bool { return p.rc.GradAccum > 1 && sharded(s) },
		set:     func(o *Options, v string) { o.GradSync = v }},
	{name: "fsdp_version", values: []string{"1", "2"},
		current: func(p point) string { return fmt.Sprint(p.as.FSDPVersion) },
		applies: func(_ point, s string) bool { return sharded(s) },
		set: func(o *Options, v string) {
			o.FSDPVersion = 1
			if v == "2" {
				o.FSDPVersion = 2
			}
		}},
}

// memoryVerdict says which of the sim's memory assumptions decide the verdict
// of a GPU point that does not fit, or fits within NearLimit of the device:
// for each assumption one of whose other values turns the verdict, the peak
// under the value used and under each value that turns it, e.g. "infeasible
// with loss upcast (93.7 GiB); fits with loss fused (71.2 GiB)". Empty when
// the point is far from the limit, when no single assumption turns it, or for
// the Go trainer, whose loss, attention and sharding are facts of its code, not
// assumptions.
func memoryVerdict(rc sweeps.RunConfig, opts Options, p point, strategy string, pred Prediction) string {
	capacity := pred.DeviceMemBytes
	if opts.noVerdict || !p.hw.IsGPU || capacity <= 0 || p.as.Trainer == TrainerGotrain {
		return ""
	}
	over := pred.PeakDeviceMemBytes > capacity
	if !over && float64(pred.PeakDeviceMemBytes) <= NearLimit*float64(capacity) {
		return ""
	}
	verdict := func(over bool) string {
		if over {
			return "infeasible"
		}
		return "fits"
	}
	var parts []string
	for _, a := range alternatives {
		if !a.applies(p, strategy) {
			continue
		}
		cur := a.current(p)
		var turned []string
		for _, v := range a.values {
			if v == cur {
				continue
			}
			o := opts
			o.noVerdict = true
			a.set(&o, v)
			alt, err := predict(rc, o)
			if err != nil || (alt.PeakDeviceMemBytes > capacity) == over {
				continue
			}
			turned = append(turned, fmt.Sprintf("%s %s (%.1f GiB)", a.name, v, gibs(alt.PeakDeviceMemBytes)))
		}
		if len(turned) > 0 {
			parts = append(parts, fmt.Sprintf("%s with %s %s (%.1f GiB); %s with %s", verdict(over), a.name, cur,
				gibs(pred.PeakDeviceMemBytes), verdict(!over), strings.Join(turned, " or ")))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + fmt.Sprintf(" (device %.1f GiB: set these backend options to what your trainer does)", gibs(capacity))
}
