package results

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Derived holds the figures that compare a run with other runs of the same set. They
// are computed when runs are loaded (Load, Derive), never stored: they depend on
// which runs are present. nil means not computable (see Derive).
type Derived struct {
	// ScalingEfficiency is tokens_per_s_per_rank over that of ScalingBaseline.
	ScalingEfficiency *float64 `json:"scaling_efficiency,omitempty"`
	ScalingBaseline   string   `json:"scaling_baseline,omitempty"`
	// MemorySaving is 1 - peak / the peak of MemoryBaseline; MemorySavingOf names the
	// peak compared (peak_mem_reserved_bytes, or peak_mem_allocated_bytes).
	MemorySaving   *float64 `json:"memory_saving,omitempty"`
	MemoryBaseline string   `json:"memory_baseline,omitempty"`
	MemorySavingOf string   `json:"memory_saving_of,omitempty"`
	// ModelStateBytes is the ZeRO paper's "model states" of one rank (parameters +
	// gradients + optimizer state) from the backend's memory breakdown.
	ModelStateBytes *int64 `json:"model_state_bytes,omitempty"`

	// Noise says why this run's timed figures are too noisy to trust (Noise: the
	// limits NoisyStepSpread, NoisyRepeatSpread, NoisyWholeVsMedian); "" when
	// they are not. ScalingEfficiencyNoise is the same for the scaling efficiency,
	// which is noisy when its run or its baseline is.
	Noise                  string `json:"noise,omitempty"`
	ScalingEfficiencyNoise string `json:"scaling_efficiency_noise,omitempty"`
	// ScalingEfficiencyWarned and MemorySavingWarned: the figure's run or its
	// baseline carries warnings (Metrics.Warnings).
	ScalingEfficiencyWarned bool `json:"scaling_efficiency_warned,omitempty"`
	MemorySavingWarned      bool `json:"memory_saving_warned,omitempty"`
}

// FieldRole says what a field of sweeps.RunConfig is to the derived figures:
// whether two runs compared with each other (a run and its scaling or memory
// baseline) must agree on it.
type FieldRole int

// Field roles (ConfigFieldRoles).
const (
	// RoleSameConfig: the field defines what is measured; a run and its baseline
	// agree on it. A field ConfigFieldRoles does not list is treated so, so that
	// a new axis keeps runs apart until someone decides otherwise.
	RoleSameConfig FieldRole = iota
	// RoleWorldSize: the field changes with the world size (weak scaling grows
	// global_batch, strong scaling shrinks grad_accum); scaling_efficiency's
	// baseline may differ in it.
	RoleWorldSize
	// RoleBookkeeping: the field names or launches the run without changing what
	// is measured (its ID, its timeout, where Slurm puts it, a search's
	// bookkeeping, the paths as the spec wrote them: the resolved values are in
	// other fields).
	RoleBookkeeping
)

// ConfigFieldRoles classifies every field of sweeps.RunConfig, by Go name. The
// derived figures' "same config" key is every field not listed as
// RoleWorldSize or RoleBookkeeping (keyOf reads the struct by reflection), so
// a field added to RunConfig is part of the key by default, and
// TestConfigFieldRolesCoverRunConfig fails until it is classified here.
var ConfigFieldRoles = map[string]FieldRole{
	"ID":              RoleBookkeeping, // Slug + a hash of the fields below
	"Slug":            RoleBookkeeping,
	"Timeout":         RoleBookkeeping, // a run past it has no figures to compare
	"LauncherOptions": RoleBookkeeping, // Slurm's partition, account, queue wait
	"OptionAxes":      RoleBookkeeping, // which backend options vary: their values are in BackendOptions
	"Search":          RoleBookkeeping, // max_fit's bookkeeping; the point is in the axes
	"SearchGroup":     RoleBookkeeping,
	"SpecPaths":       RoleBookkeeping, // paths as written; the resolved ones are in Model, Hardware, BackendOptions

	"Nodes":       RoleWorldSize,
	"GPUsPerNode": RoleWorldSize,
	"WorldSize":   RoleWorldSize,
	"GradAccum":   RoleWorldSize,
	"GlobalBatch": RoleWorldSize,

	"Sweep": RoleSameConfig, "Backend": RoleSameConfig, "Launcher": RoleSameConfig,
	"Hardware": RoleSameConfig, "Model": RoleSameConfig, "SeqLen": RoleSameConfig,
	"Steps": RoleSameConfig, "WarmupSteps": RoleSameConfig, "Repeats": RoleSameConfig,
	"RepeatsMin": RoleSameConfig, "RepeatsCI": RoleSameConfig, "Seed": RoleSameConfig,
	"BatchPerDevice": RoleSameConfig, "Sharding": RoleSameConfig,
	"ActivationCheckpointing": RoleSameConfig, "BackwardPrefetch": RoleSameConfig,
	"ForwardPrefetch": RoleSameConfig, "CPUOffload": RoleSameConfig,
	"MixedPrecision": RoleSameConfig, "WrapPolicy": RoleSameConfig, "Compile": RoleSameConfig,
	"Checkpoint": RoleSameConfig, "CheckpointEvery": RoleSameConfig, "ResumeCheck": RoleSameConfig,
	"BackendOptions": RoleSameConfig, "Env": RoleSameConfig,
	"InputHashes": RoleSameConfig, // an edited script or model file trains something else
}

// keyFields are the indices of RunConfig's fields in the same-config key, in
// declaration order; Sharding and the world-size fields are kept apart in
// pointKey, since memory_saving compares across sharding and
// scaling_efficiency across the world size.
var keyFields = func() []int {
	t := reflect.TypeFor[sweeps.RunConfig]()
	var out []int
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Name == "Sharding" {
			continue
		}
		if role := ConfigFieldRoles[f.Name]; role == RoleSameConfig {
			out = append(out, i)
		}
	}
	return out
}()

// pointKey is the comparable form of a RunConfig (which holds maps): rest is the
// canonical text of every same-config field but sharding (keyFields), so two
// keys are equal when the runs agree on every field that is not bookkeeping.
type pointKey struct {
	rest                                                  string
	sharding                                              string
	nodes, gpusPerNode, worldSize, gradAccum, globalBatch int
}

func keyOf(rc *sweeps.RunConfig) pointKey {
	c := *rc
	// A config stored before the checkpoint axis has none written as "".
	c.Checkpoint = checkpointKind(rc)
	v := reflect.ValueOf(&c).Elem()
	var b []byte
	for _, i := range keyFields {
		b = append(b, v.Type().Field(i).Name...)
		b = append(b, '=')
		b = appendKeyValue(b, v.Field(i))
		b = append(b, ';')
	}
	return pointKey{rest: string(b), sharding: rc.Sharding, nodes: rc.Nodes, gpusPerNode: rc.GPUsPerNode,
		worldSize: rc.WorldSize, gradAccum: rc.GradAccum, globalBatch: rc.GlobalBatch}
}

// appendKeyValue appends a canonical text of v: plain kinds directly (Derive
// keys every run of a 100,000-run set), anything else as its JSON, where maps
// come out with sorted keys; an empty map or slice is the same as none.
func appendKeyValue(b []byte, v reflect.Value) []byte {
	switch v.Kind() {
	case reflect.String:
		return strconv.AppendQuote(b, v.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.AppendUint(b, v.Uint(), 10)
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool())
	case reflect.Float32, reflect.Float64:
		return strconv.AppendFloat(b, v.Float(), 'g', -1, 64)
	case reflect.Map, reflect.Slice:
		if v.Len() == 0 {
			return append(b, "null"...)
		}
		if m, ok := v.Interface().(map[string]string); ok {
			// Env, on every run of an env axis: sorted without encoding/json's reflection.
			names := make([]string, 0, len(m))
			for k := range m {
				names = append(names, k)
			}
			sort.Strings(names)
			b = append(b, '{')
			for _, k := range names {
				b = strconv.AppendQuote(b, k)
				b = append(b, ':')
				b = strconv.AppendQuote(b, m[k])
				b = append(b, ',')
			}
			return append(b, '}')
		}
	}
	j, err := json.Marshal(v.Interface())
	if err != nil {
		return strconv.AppendQuote(b, fmt.Sprint(v.Interface()))
	}
	return append(b, j...)
}

// optionsText is the canonical text of backend options (encoding/json sorts map
// keys), so two runs with the same options compare equal.
func optionsText(o map[string]any) string {
	if len(o) == 0 {
		return ""
	}
	b, err := json.Marshal(o)
	if err != nil {
		return "unencodable"
	}
	return string(b)
}

// Derive fills Derived in every run from the others (Load calls it; call it for runs
// built in memory). Both figures exist only when the run and its baseline are ok.
//
// scaling_efficiency: the same config is every field of the run config equal
// (env, checkpointing and backend options included) except those
// ConfigFieldRoles lists as changing with the world size (nodes, gpus_per_node,
// world_size, grad_accum and global_batch: weak scaling fixes batch_per_device and
// grad_accum, strong scaling global_batch) or as bookkeeping (ID, timeout,
// launcher options, ...). The baseline is the run of the same config at
// the smallest world size present; where several are there, the one with the same
// grad_accum (weak scaling), else the same global_batch (strong scaling), fewest
// nodes first. The smallest world size's own run has efficiency 1; a config run at
// one world size only has none (nil). Above 1 is possible: under sharding each
// rank's share of the optimizer step shrinks as 1/N, which can outweigh the
// added communication (and measured runs are noisy); tables say so in a note.
//
// memory_saving: the baseline is the no_shard run, else the ddp run, with every other
// field of the config equal but the bookkeeping ones.
//
// Marks: Derive also says which runs' timed figures are too noisy to trust
// (Derived.Noise, see Noise) and carries noise and warnings from a baseline to
// the derived figure built on it (ScalingEfficiencyNoise, *Warned), so that a
// 421% efficiency over a noisy baseline is marked as the baseline is. The peaks compared are peak_mem_reserved_bytes when both runs report
// it, else peak_mem_allocated_bytes when both do (PyTorch's reserved includes the
// caching allocator's slack, which is what decides an OOM).
func Derive(runs []Run) {
	scaling := map[pointKey][]int{}
	memory := map[pointKey]map[string]int{}
	keys := make([]pointKey, len(runs))
	for i := range runs {
		runs[i].Derived = Derived{ModelStateBytes: modelStateBytes(runs[i].Metrics.MemBreakdownBytes)}
		if m := &runs[i].Metrics; len(m.Warnings) == 0 && m.Extra["warnings"] != nil {
			// metrics.json written before it had warnings kept them in extra only.
			m.Warnings = collectWarnings([]Result{{Extra: m.Extra}})
		}
		rc := &runs[i].Config
		k := keyOf(rc)
		keys[i] = k
		sk := k
		sk.nodes, sk.gpusPerNode, sk.worldSize, sk.gradAccum, sk.globalBatch = 0, 0, 0, 0, 0
		scaling[sk] = append(scaling[sk], i)
		if rc.Sharding == sweeps.NoShard || rc.Sharding == sweeps.DDP {
			mk := k
			mk.sharding = ""
			if memory[mk] == nil {
				memory[mk] = map[string]int{}
			}
			memory[mk][rc.Sharding] = i
		}
	}

	for _, group := range scaling {
		minWS := runs[group[0]].Config.WorldSize
		for _, i := range group {
			minWS = min(minWS, runs[i].Config.WorldSize)
		}
		var smallest []int
		for _, i := range group {
			if runs[i].Config.WorldSize == minWS {
				smallest = append(smallest, i)
			}
		}
		if len(smallest) == len(group) {
			// One world size: nothing scaled, so no efficiency (a 100% would
			// claim a comparison that was never made).
			continue
		}
		sort.Slice(smallest, func(a, b int) bool {
			ra, rb := &runs[smallest[a]].Config, &runs[smallest[b]].Config
			if ra.Nodes != rb.Nodes {
				return ra.Nodes < rb.Nodes
			}
			return ra.ID < rb.ID
		})
		for _, i := range group {
			r := &runs[i]
			base := -1
			for _, j := range smallest {
				if runs[j].Config.GradAccum == r.Config.GradAccum {
					base = j
					break
				}
			}
			if base < 0 {
				for _, j := range smallest {
					if runs[j].Config.GlobalBatch == r.Config.GlobalBatch {
						base = j
						break
					}
				}
			}
			if base < 0 {
				continue
			}
			b := &runs[base]
			if r.Metrics.Status != StatusOK || b.Metrics.Status != StatusOK ||
				r.Metrics.TokensPerSPerRank == nil || b.Metrics.TokensPerSPerRank == nil ||
				*b.Metrics.TokensPerSPerRank <= 0 {
				continue
			}
			eff := *r.Metrics.TokensPerSPerRank / *b.Metrics.TokensPerSPerRank
			if math.IsInf(eff, 0) || math.IsNaN(eff) {
				continue // figures CheckMetrics refuses; unknown rather than +Inf
			}
			r.Derived.ScalingEfficiency = F64(eff)
			r.Derived.ScalingBaseline = b.Config.ID
		}
	}

	for i := range runs {
		r := &runs[i]
		if r.Metrics.Status != StatusOK {
			continue
		}
		mk := keys[i]
		mk.sharding = ""
		bases := memory[mk]
		base, ok := bases[sweeps.NoShard]
		if !ok {
			base, ok = bases[sweeps.DDP]
		}
		if !ok {
			continue
		}
		b := &runs[base]
		if b.Metrics.Status != StatusOK {
			continue
		}
		of, peak, basePeak := SamplePeakReserved, r.Metrics.PeakMemReservedBytes, b.Metrics.PeakMemReservedBytes
		if peak == nil || basePeak == nil {
			of, peak, basePeak = SamplePeakAllocated, r.Metrics.PeakMemAllocatedBytes, b.Metrics.PeakMemAllocatedBytes
		}
		if peak == nil || basePeak == nil || *basePeak <= 0 {
			continue
		}
		saving := 1 - float64(*peak)/float64(*basePeak)
		if math.IsInf(saving, 0) || math.IsNaN(saving) {
			continue
		}
		r.Derived.MemorySaving = F64(saving)
		r.Derived.MemoryBaseline = b.Config.ID
		r.Derived.MemorySavingOf = of
	}

	byID := make(map[string]int, len(runs))
	for i := range runs {
		byID[runs[i].Config.ID] = i
	}
	markNoise(runs, byID)
}

// modelStateBytes sums the parameters, gradients and optimizer state a backend
// reported in its memory breakdown; nil when any is missing (unknown, not zero).
func modelStateBytes(b map[string]int64) *int64 {
	p, okP := b["params"]
	g, okG := b["grads"]
	o, okO := b["optimizer"]
	if !okP || !okG || !okO || p < 0 || g < 0 || o < 0 || p > math.MaxInt64-g || p+g > math.MaxInt64-o {
		return nil // missing, or figures that would overflow: unknown, not a wrapped sum
	}
	return I64(p + g + o)
}
