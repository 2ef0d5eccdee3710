package sim

import (
	"context"
	"encoding/json"
	"reflect"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// notPredicted lists the RunConfig fields that neither a prediction
// (PredictCalibrated) nor Validate reads, with why: runs differing only in them
// share a prediction, so Memo leaves them out of its key. Every other field is
// in memoKey. TestMemoKeyFieldsClassified checks by reflection that each field
// of RunConfig is in exactly one of the two, and that changing a field listed
// here changes neither the prediction nor Validate's verdict.
var notPredicted = map[string]string{
	"ID":          "the run's name, made from fields the key holds",
	"Slug":        "as ID",
	"Sweep":       "the sweep's name",
	"Launcher":    "where the processes start: the model predicts one step wherever it runs",
	"Repeats":     "how many times the run is measured",
	"RepeatsMin":  "as Repeats",
	"RepeatsCI":   "as Repeats",
	"Timeout":     "a limit on the run",
	"Seed":        "the data and initialization, not the step's cost (only Run's checkpoint metadata prints it)",
	"Compile":     "the model does not predict torch.compile's effect",
	"InputHashes": "the content of files Model and BackendOptions name, which the key holds by path",
	"OptionAxes":  "which options vary: their values are in BackendOptions",
	"Search":      "bookkeeping of a max_fit search",
	"SearchGroup": "as Search",
	"SpecPaths":   "the paths as the spec wrote them; the resolved ones, which the sim opens, are in the key",
	// Slurm's partition or account: where the processes start.
	"LauncherOptions": "as Launcher",
}

// memoKey is what a prediction and Validate's verdict depend on: every
// RunConfig field but those notPredicted lists, with the maps encoded.
type memoKey struct {
	Backend, Hardware, Model               string
	SeqLen, Steps, WarmupSteps             int
	Nodes, GPUsPerNode, WorldSize          int
	BatchPerDevice, GradAccum, GlobalBatch int
	Sharding, BackwardPrefetch             string
	MixedPrecision, WrapPolicy             string
	ActivationCheckpointing                bool
	ForwardPrefetch, CPUOffload            bool
	Checkpoint                             string
	CheckpointEvery                        int
	ResumeCheck                            bool
	// BackendOptions is the options map's address (0 for none): its values
	// are YAML's (an int and a float of one value print alike), so the key
	// holds the map itself, which runs share unless an option varies; the
	// entry keeps the map alive, so no other map takes its address.
	BackendOptions uintptr
	// Env is the environment as JSON (keys sorted); "" for none.
	Env string
}

// memoEntry is one key's prediction and verdict, each made when first asked.
type memoEntry struct {
	pred                Prediction
	perr, verr          error
	predicted, verified bool
	// opts is the options map the key holds the address of.
	opts map[string]any
}

// memoMax bounds the entries a Memo holds (a few KB each): past it the memo
// starts over. A grid's points that differ only in fields the sim ignores
// (seed) lie a fixed stride apart in the expansion order, so a bound well
// above the usual stride keeps most of the sharing at a fixed cost in memory.
const memoMax = 1 << 14

// Memo predicts and validates runs as PredictCalibrated and (*Backend).Validate
// do, once per distinct memoKey: `plan` of a grid whose seed axis (or another
// the sim ignores) has five values predicts a fifth of its points. The
// predictions it returns are shared between runs: treat them as read-only. A
// Memo is not safe for concurrent use.
type Memo struct {
	extra map[string]any
	cal   *Calibration
	m     map[memoKey]*memoEntry
	// lastEnv and envEnc cache the encoding of the last environment: a
	// plan's runs share it unless a variable varies, and holding the map keeps
	// its address from being reused by another.
	lastEnv map[string]string
	envEnc  string
	// lastKey and last are the entry asked for last: plan asks for a run's
	// verdict and then its prediction, and comparing a key is cheaper than
	// hashing it.
	lastKey memoKey
	last    *memoEntry
}

// NewMemo returns a memo of PredictCalibrated(rc, extra, cal) and Validate.
// extra and cal must not change while it is used.
func NewMemo(extra map[string]any, cal *Calibration) *Memo {
	return &Memo{extra: extra, cal: cal, m: map[memoKey]*memoEntry{}}
}

// Predict is PredictCalibrated(rc, extra, cal), made once per key.
func (m *Memo) Predict(rc sweeps.RunConfig) (Prediction, error) {
	e := m.entry(&rc)
	if e == nil {
		return PredictCalibrated(rc, m.extra, m.cal)
	}
	if !e.predicted {
		e.pred, e.perr = PredictCalibrated(rc, m.extra, m.cal)
		e.predicted = true
	}
	return e.pred, e.perr
}

// Validate is the sim backend's Validate, made once per key.
func (m *Memo) Validate(ctx context.Context, rc sweeps.RunConfig) error {
	e := m.entry(&rc)
	if e == nil {
		return (&Backend{}).Validate(ctx, rc)
	}
	if !e.verified {
		e.verr = (&Backend{}).Validate(ctx, rc)
		e.verified = true
	}
	return e.verr
}

// entry is rc's memo entry, made empty when new; nil when rc's environment
// does not encode (then nothing is shared).
func (m *Memo) entry(rc *sweeps.RunConfig) *memoEntry {
	k, ok := m.key(rc)
	if !ok {
		return nil
	}
	if m.last != nil && k == m.lastKey {
		return m.last
	}
	e := m.m[k]
	if e == nil {
		if len(m.m) >= memoMax {
			clear(m.m)
		}
		e = &memoEntry{}
		if k.BackendOptions != 0 {
			e.opts = rc.BackendOptions
		}
		m.m[k] = e
	}
	m.lastKey, m.last = k, e
	return e
}

// key is rc's memoKey; false when its environment cannot be encoded.
func (m *Memo) key(rc *sweeps.RunConfig) (memoKey, bool) {
	k := memoKey{
		Backend: rc.Backend, Hardware: rc.Hardware, Model: rc.Model,
		SeqLen: rc.SeqLen, Steps: rc.Steps, WarmupSteps: rc.WarmupSteps,
		Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode, WorldSize: rc.WorldSize,
		BatchPerDevice: rc.BatchPerDevice, GradAccum: rc.GradAccum, GlobalBatch: rc.GlobalBatch,
		Sharding: rc.Sharding, BackwardPrefetch: rc.BackwardPrefetch,
		MixedPrecision: rc.MixedPrecision, WrapPolicy: rc.WrapPolicy,
		ActivationCheckpointing: rc.ActivationCheckpointing,
		ForwardPrefetch:         rc.ForwardPrefetch, CPUOffload: rc.CPUOffload,
		Checkpoint: rc.Checkpoint, CheckpointEvery: rc.CheckpointEvery, ResumeCheck: rc.ResumeCheck,
	}
	if len(rc.BackendOptions) > 0 {
		k.BackendOptions = reflect.ValueOf(rc.BackendOptions).Pointer()
	}
	if len(rc.Env) > 0 {
		if !sameMap(rc.Env, m.lastEnv) {
			b, err := json.Marshal(rc.Env)
			if err != nil {
				return k, false
			}
			m.lastEnv, m.envEnc = rc.Env, string(b)
		}
		k.Env = m.envEnc
	}
	return k, true
}

// sameMap says whether a and b are the same map (not merely equal ones).
func sameMap(a, b map[string]string) bool {
	return b != nil && reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}
