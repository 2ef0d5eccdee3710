package sweeps

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// field identifies a setting or axis of a RunConfig. The axes come first, in the
// order DESIGN.md lists them; a bit per field makes "which fields did this point
// give" one integer.
type field uint8

const (
	fNodes field = iota
	fGPUsPerNode
	fWorldSize
	fBatchPerDevice
	fGradAccum
	fGlobalBatch
	fSeqLen
	fModel
	fSharding
	fActivationCheckpointing
	fBackwardPrefetch
	fForwardPrefetch
	fCPUOffload
	fMixedPrecision
	fWrapPolicy
	fCompile
	fHardware
	fSeed
	fCheckpoint
	fCheckpointEvery
	fResumeCheck
	// Settings below are not axes: they do not enter the run ID.
	fName
	fBackend
	fLauncher
	fSteps
	fWarmupSteps
	fRepeats
	fTimeout
	numFields
)

type mask uint32

func (m mask) has(f field) bool { return m&(1<<f) != 0 }

// valueKind is how a key's value is read and checked.
type valueKind uint8

const (
	kindInt      valueKind = iota // integer >= min
	kindBool                      // true / false
	kindEnum                      // one of values
	kindString                    // free text, checked by a callback (model, hardware, backend)
	kindDuration                  // Go duration string, > 0
	kindWrap                      // transformer | size:<min params>
	kindName                      // a safe directory name
)

// scope says where a key may appear.
type scope uint8

const (
	inTop  scope = 1 << iota // top level of the spec
	inBase                   // under base:
	inAxis                   // as a grid axis, in include and exclude entries
)

type keyDef struct {
	name   string
	f      field
	kind   valueKind
	values []string // kindEnum
	min    int64    // kindInt
	max    int64    // kindInt
	where  scope
}

// Upper bounds of the numeric settings. Each is far beyond any real run, and low
// enough that products of them (tokens per step, memory per rank) fit in an int64
// and that a typo (steps: 1e12) is refused before it starts anything.
const (
	// MaxNodes is about the largest GPU clusters built (100,000 GPUs at 8 a node).
	MaxNodes = 16_384
	// MaxGPUsPerNode allows CPU runs with a rank per core of a large host.
	MaxGPUsPerNode = 1024
	// MaxWorldSize is 2^17 ranks.
	MaxWorldSize = 131_072
	// MaxBatchPerDevice and MaxGradAccum are 2^16 each.
	MaxBatchPerDevice = 65_536
	MaxGradAccum      = 65_536
	// MaxGlobalBatch is 2^30 samples per optimizer step.
	MaxGlobalBatch = 1 << 30
	// MaxSeqLen is 2^24 tokens, past the longest context windows trained.
	MaxSeqLen = 1 << 24
	// MaxSteps bounds steps and warmup_steps: a million steps of per-step figures
	// is some 100 MB of results per run.
	MaxSteps = 1_000_000
	// MaxRepeats bounds whole-run repetitions (statistics need 6 or more).
	MaxRepeats = 1000
	// MaxSeed is 2^32 - 1: numpy.random.seed, and so many training scripts, take
	// no larger seed.
	MaxSeed = 1<<32 - 1
	// MaxTimeout is 30 days, longer than any cluster's job time limit.
	MaxTimeout = 30 * 24 * time.Hour
)

var keyDefs = [numFields]keyDef{
	fNodes:                   {name: "nodes", kind: kindInt, min: 1, max: MaxNodes, where: inBase | inAxis},
	fGPUsPerNode:             {name: "gpus_per_node", kind: kindInt, min: 1, max: MaxGPUsPerNode, where: inBase | inAxis},
	fWorldSize:               {name: "world_size", kind: kindInt, min: 1, max: MaxWorldSize, where: inBase | inAxis},
	fBatchPerDevice:          {name: "batch_per_device", kind: kindInt, min: 1, max: MaxBatchPerDevice, where: inBase | inAxis},
	fGradAccum:               {name: "grad_accum", kind: kindInt, min: 1, max: MaxGradAccum, where: inBase | inAxis},
	fGlobalBatch:             {name: "global_batch", kind: kindInt, min: 1, max: MaxGlobalBatch, where: inBase | inAxis},
	fSeqLen:                  {name: "seq_len", kind: kindInt, min: 1, max: MaxSeqLen, where: inTop | inBase | inAxis},
	fModel:                   {name: "model", kind: kindString, where: inTop | inBase | inAxis},
	fSharding:                {name: "sharding", kind: kindEnum, values: ShardingValues, where: inBase | inAxis},
	fActivationCheckpointing: {name: "activation_checkpointing", kind: kindBool, where: inBase | inAxis},
	fBackwardPrefetch:        {name: "backward_prefetch", kind: kindEnum, values: BackwardPrefetchValues, where: inBase | inAxis},
	fForwardPrefetch:         {name: "forward_prefetch", kind: kindBool, where: inBase | inAxis},
	fCPUOffload:              {name: "cpu_offload", kind: kindBool, where: inBase | inAxis},
	fMixedPrecision:          {name: "mixed_precision", kind: kindEnum, values: MixedPrecisionValues, where: inBase | inAxis},
	fWrapPolicy:              {name: "wrap_policy", kind: kindWrap, where: inBase | inAxis},
	fCompile:                 {name: "compile", kind: kindBool, where: inBase | inAxis},
	fHardware:                {name: "hardware", kind: kindString, where: inTop | inBase | inAxis},
	fSeed:                    {name: "seed", kind: kindInt, min: 0, max: MaxSeed, where: inTop | inBase | inAxis},
	fCheckpoint:              {name: "checkpoint", kind: kindEnum, values: CheckpointValues, where: inBase | inAxis},
	fCheckpointEvery:         {name: "checkpoint_every", kind: kindInt, min: 1, max: MaxSteps, where: inBase | inAxis},
	fResumeCheck:             {name: "resume_check", kind: kindBool, where: inBase | inAxis},
	fName:                    {name: "name", kind: kindName, where: inTop},
	fBackend:                 {name: "backend", kind: kindString, where: inTop | inBase},
	fLauncher:                {name: "launcher", kind: kindEnum, values: LauncherValues, where: inTop | inBase},
	fSteps:                   {name: "steps", kind: kindInt, min: 1, max: MaxSteps, where: inTop | inBase},
	fWarmupSteps:             {name: "warmup_steps", kind: kindInt, min: 0, max: MaxSteps, where: inTop | inBase},
	fRepeats:                 {name: "repeats", kind: kindInt, min: 1, max: MaxRepeats, where: inTop | inBase},
	fTimeout:                 {name: "timeout", kind: kindDuration, where: inTop | inBase},
}

// Launchers.
const (
	LauncherLocal = "local"
	LauncherSlurm = "slurm"
)

// LauncherValues lists the allowed values of launcher.
var LauncherValues = []string{LauncherLocal, LauncherSlurm}

// scriptLaunchers are the torchrun backend's backend_options.launcher values,
// which a spec may put at the top level by mistake.
var scriptLaunchers = []string{"torchrun", "accelerate", "python", "command"}

// Structural top-level keys (not settings).
const (
	keyBase            = "base"
	keyGrid            = "grid"
	keyExclude         = "exclude"
	keyInclude         = "include"
	keySearch          = "search"
	keyBackendOptions  = "backend_options"
	keyLauncherOptions = "launcher_options"
)

// TopLevelKeys lists the keys a spec may have at its top level, in the order the
// resolved spec writes them.
var TopLevelKeys = []string{"name", "backend", "launcher", "hardware", "model", "seq_len",
	"steps", "warmup_steps", "repeats", "timeout", "seed",
	keyBase, keyGrid, keyExclude, keyInclude, keySearch, keyBackendOptions, keyLauncherOptions, keyEnv}

// Axes lists the canonical axis names: what grid, include, exclude and base take.
var Axes = func() []string {
	var out []string
	for _, d := range keyDefs {
		if d.where&inAxis != 0 {
			out = append(out, d.name)
		}
	}
	return out
}()

// baseKeys lists what base: takes: the axes and the run settings.
var baseKeys = func() []string {
	var out []string
	for _, d := range keyDefs {
		if d.where&inBase != 0 {
			out = append(out, d.name)
		}
	}
	return out
}()

var keyByName = func() map[string]*keyDef {
	m := make(map[string]*keyDef, numFields)
	for i := range keyDefs {
		keyDefs[i].f = field(i)
		m[keyDefs[i].name] = &keyDefs[i]
	}
	return m
}()

// value is one checked value of a key, with where it was written.
type value struct {
	f   field
	i   int64  // int and bool (0/1) kinds
	s   string // string kinds, canonical form
	pos pos
	// key and raw are set for fDyn: the key (env.NAME, backend_options.NAME),
	// and an option's value as the spec gave it (s is then its JSON).
	key string
	raw any
}

// String renders the value as a spec would write it.
func (v value) String() string {
	if v.f == fDyn {
		return v.dynString()
	}
	if a, ok := v.raw.(autoRepeats); ok {
		return a.String()
	}
	switch keyDefs[v.f].kind {
	case kindInt:
		return strconv.FormatInt(v.i, 10)
	case kindBool:
		return strconv.FormatBool(v.i != 0)
	}
	return v.s
}

func (v value) equal(w value) bool { return v.i == w.i && v.s == w.s }

// apply writes v into rc.
func (v value) apply(rc *RunConfig) {
	switch v.f {
	case fDyn:
		v.applyDyn(rc)
	case fNodes:
		rc.Nodes = int(v.i)
	case fGPUsPerNode:
		rc.GPUsPerNode = int(v.i)
	case fWorldSize:
		rc.WorldSize = int(v.i)
	case fBatchPerDevice:
		rc.BatchPerDevice = int(v.i)
	case fGradAccum:
		rc.GradAccum = int(v.i)
	case fGlobalBatch:
		rc.GlobalBatch = int(v.i)
	case fSeqLen:
		rc.SeqLen = int(v.i)
	case fModel:
		rc.Model = v.s
	case fSharding:
		rc.Sharding = v.s
	case fActivationCheckpointing:
		rc.ActivationCheckpointing = v.i != 0
	case fBackwardPrefetch:
		rc.BackwardPrefetch = v.s
	case fForwardPrefetch:
		rc.ForwardPrefetch = v.i != 0
	case fCPUOffload:
		rc.CPUOffload = v.i != 0
	case fMixedPrecision:
		rc.MixedPrecision = v.s
	case fWrapPolicy:
		rc.WrapPolicy = v.s
	case fCompile:
		rc.Compile = v.i != 0
	case fHardware:
		rc.Hardware = v.s
	case fSeed:
		rc.Seed = v.i
	case fCheckpoint:
		rc.Checkpoint = v.s
	case fCheckpointEvery:
		rc.CheckpointEvery = int(v.i)
	case fResumeCheck:
		rc.ResumeCheck = v.i != 0
	case fBackend:
		rc.Backend = v.s
	case fLauncher:
		rc.Launcher = v.s
	case fSteps:
		rc.Steps = int(v.i)
	case fWarmupSteps:
		rc.WarmupSteps = int(v.i)
	case fRepeats:
		rc.Repeats = int(v.i)
		rc.RepeatsMin, rc.RepeatsCI = 0, 0
		if a, ok := v.raw.(autoRepeats); ok {
			rc.RepeatsMin, rc.RepeatsCI = a.min, a.ci
		}
	case fTimeout:
		rc.Timeout = Duration(v.i)
	case fName:
		rc.Sweep = v.s
	}
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// wrapSize reads the number of a size:<min params> wrap policy: digits with an
// optional k/M/B suffix (size:100M), or a float with an exponent (size:1e8).
var wrapSize = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+)?)([kKmMbBgG]?)$`)

// readValue checks one scalar n as a value of key d. A failure is reported to e;
// ok is false then.
func (p *parsing) readValue(d *keyDef, n *node) (value, bool) {
	if d.f == fDyn {
		return p.readDyn(d, n)
	}
	if d.f == fRepeats && (n.kind == mapNode || (n.kind == scalarNode && n.val == "auto")) {
		return p.readAutoRepeats(d, n)
	}
	v := value{f: d.f, pos: n.pos}
	if n.kind != scalarNode {
		p.e.at(n.pos, "%s must be %s, got %s%s", d.name, d.expect(), n.describe(), repeatsHint(d, n))
		return v, false
	}
	switch d.kind {
	case kindInt:
		i, ok := n.val.(int64)
		if f, isFloat := n.val.(float64); isFloat && f == math.Trunc(f) && math.Abs(f) < 1<<62 {
			// 2048.0 and 1e6 are whole numbers written as floats: take them as the
			// integers they are (and bound them as any other).
			i, ok = int64(f), true
		}
		if !ok {
			hint := ""
			if s, isStr := n.val.(string); isStr {
				if _, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
					hint = " (remove the quotes)"
				}
			}
			hint += repeatsHint(d, n)
			p.e.at(n.pos, "%s must be %s, got %s%s", d.name, d.expect(), n.describe(), hint)
			return v, false
		}
		if i < d.min || i > d.max {
			p.e.at(n.pos, "%s must be %s, got %s", d.name, d.expect(), n.written())
			return v, false
		}
		v.i = i
	case kindBool:
		b, ok := n.val.(bool)
		if !ok {
			p.e.at(n.pos, "%s must be true or false, got %s", d.name, n.describe())
			return v, false
		}
		if b {
			v.i = 1
		}
	default:
		s, ok := n.val.(string)
		if !ok {
			hint := ""
			switch d.kind {
			case kindString, kindName:
				hint = " (quote it if you mean a name)"
			case kindDuration:
				if i, isInt := n.val.(int64); isInt {
					hint = fmt.Sprintf(" (add a unit: %ds or %dm)", i, i)
				}
			}
			p.e.at(n.pos, "%s must be %s, got %s%s", d.name, d.expect(), n.describe(), hint)
			return v, false
		}
		if d.f == fModel {
			p.resolveModel(s, n.pos)
			p.hashModel(s, n.pos)
		}
		if d.f == fHardware {
			p.resolveHardware(s, n.pos)
		}
		var err string
		v.s, v.i, err = p.readString(d, s)
		if err != "" {
			p.e.at(n.pos, "%s", err)
			return v, false
		}
	}
	return v, true
}

// readString checks and canonicalizes a string value; err is the message on failure.
func (p *parsing) readString(d *keyDef, s string) (canon string, i int64, err string) {
	switch d.kind {
	case kindEnum:
		for _, a := range d.values {
			if s == a {
				return s, 0, ""
			}
		}
		msg := fmt.Sprintf("unknown %s %s (allowed: %s%s)", d.name, q(s), strings.Join(d.values, ", "), didYouMean(s, d.values))
		if d.name == "launcher" && slices.Contains(scriptLaunchers, s) {
			msg += fmt.Sprintf("; launcher says where runs go; how the torchrun backend starts a script is backend_options.launcher: %s", s)
		}
		return "", 0, msg
	case kindDuration:
		dur, perr := time.ParseDuration(s)
		if perr != nil || dur <= 0 || dur > MaxTimeout {
			return "", 0, fmt.Sprintf("%s must be a positive Go duration such as 30m, 90s or 1h30m, at most 720h (30 days), got %s", d.name, q(s))
		}
		return dur.String(), int64(dur), ""
	case kindWrap:
		return readWrapPolicy(s)
	case kindName:
		if len(s) > 100 || !safeName.MatchString(s) {
			return "", 0, fmt.Sprintf("name %s cannot name a results directory: use letters, digits, '.', '_' and '-' (starting with a letter or digit, at most 100 characters), e.g. %q", q(s), suggestName(s))
		}
		return s, 0, ""
	}
	if strings.TrimSpace(s) == "" {
		return "", 0, fmt.Sprintf("%s must not be empty", d.name)
	}
	var check func(string) error
	switch d.f {
	case fModel:
		check = p.opts.CheckModel
	case fHardware:
		if s == HardwareAuto {
			return s, 0, ""
		}
		check = p.opts.CheckHardware
	case fBackend:
		check = p.opts.CheckBackend
	}
	if check != nil {
		arg := s
		if d.f == fModel {
			arg = p.modelPath(s) // checked where it will be opened
		}
		if d.f == fHardware {
			arg = p.hardwarePath(s)
		}
		if cerr := check(arg); cerr != nil {
			return "", 0, fmt.Sprintf("%s %s: %v", d.name, q(s), cerr)
		}
	}
	return s, 0, ""
}

// HardwareAuto is the hardware value that means "detect it"; it is never passed to
// Options.CheckHardware.
const HardwareAuto = "auto"

// readWrapPolicy canonicalizes "transformer" and "size:<min params>" (size:100M and
// size:100000000 are the same policy, so they get the same run ID).
func readWrapPolicy(s string) (string, int64, string) {
	const allowed = "allowed: transformer, or size:<min params> such as size:100000000 or size:100M"
	if s == "transformer" {
		return s, 0, ""
	}
	num, ok := strings.CutPrefix(s, "size:")
	if !ok {
		return "", 0, fmt.Sprintf("unknown wrap_policy %s (%s%s)", q(s), allowed, didYouMean(s, []string{"transformer", "size:"}))
	}
	m := wrapSize.FindStringSubmatch(strings.TrimSpace(num))
	if m == nil {
		return "", 0, fmt.Sprintf("wrap_policy %s: the size must be a number of parameters (%s)", q(s), allowed)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	mult := map[string]float64{"": 1, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "b": 1e9, "B": 1e9, "g": 1e9, "G": 1e9}[m[2]]
	f *= mult
	if err != nil || f < 1 || f > 1e15 || f != math.Trunc(f) {
		return "", 0, fmt.Sprintf("wrap_policy %s: the size must be a whole number of parameters between 1 and 1e15 (%s)", q(s), allowed)
	}
	return "size:" + strconv.FormatInt(int64(f), 10), 0, ""
}

// suggestName turns s into a name that would be accepted.
func suggestName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		case b.Len() > 0:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-._")
	if len(out) > 100 {
		out = out[:100]
	}
	if out == "" {
		return "my-sweep"
	}
	return out
}

// expect describes what a key takes, for error messages.
func (d *keyDef) expect() string {
	switch d.kind {
	case kindInt:
		if d.min == 1 {
			return fmt.Sprintf("a positive integer (at most %d)", d.max)
		}
		return fmt.Sprintf("an integer from %d to %d", d.min, d.max)
	case kindBool:
		return "true or false"
	case kindEnum:
		return "one of " + strings.Join(d.values, ", ")
	case kindDuration:
		return "a Go duration such as 30m or 90s"
	case kindWrap:
		return "transformer or size:<min params>"
	case kindName:
		return "a name (letters, digits, '.', '_', '-')"
	}
	switch d.f {
	case fModel:
		return "a model preset name or a path to a config.json"
	case fHardware:
		return "a hardware profile name (or auto)"
	}
	return "a name"
}
