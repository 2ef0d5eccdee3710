// Package sweeps turns a sweep spec (YAML) into a validated, deterministic list of
// RunConfigs: the grid is expanded, base/include/exclude applied, derived axes filled
// in, and every run given a stable ID. It knows nothing about how runs execute.
package sweeps

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"
)

// Sharding strategies, as PyTorch FSDP names them, plus DDP as the baseline.
const (
	FullShard   = "full_shard"
	ShardGradOp = "shard_grad_op"
	HybridShard = "hybrid_shard"
	NoShard     = "no_shard"
	DDP         = "ddp"
)

// Backward prefetch settings (PyTorch's BackwardPrefetch, plus none).
const (
	BackwardPre  = "backward_pre"
	BackwardPost = "backward_post"
	PrefetchNone = "none"
)

// Mixed precision settings.
const (
	BF16 = "bf16"
	FP16 = "fp16"
	FP32 = "fp32"
)

// ShardingValues lists the allowed values of the sharding axis, in display order.
var ShardingValues = []string{FullShard, ShardGradOp, HybridShard, NoShard, DDP}

// BackwardPrefetchValues lists the allowed values of the backward_prefetch axis.
var BackwardPrefetchValues = []string{BackwardPre, BackwardPost, PrefetchNone}

// MixedPrecisionValues lists the allowed values of the mixed_precision axis.
var MixedPrecisionValues = []string{BF16, FP16, FP32}

// Duration is a time.Duration that reads and writes as a Go duration string ("10m").
type Duration time.Duration

// String formats the duration as time.Duration does ("10m0s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string such as "10m0s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string ("90s", "10m") or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("duration must be a string like \"10m\" or a number of seconds")
	}
	// Past ±292 years a time.Duration overflows: converting would give garbage.
	if math.IsNaN(secs) || math.Abs(secs) > float64(math.MaxInt64)/float64(time.Second) {
		return fmt.Errorf("duration %g s is out of range", secs)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// RunConfig is one fully resolved point of a sweep: everything a backend needs to
// execute it. It is plain data (JSON), so it travels to plugins and into run_args.json.
type RunConfig struct {
	// ID is Slug + "-" + a 64-bit hash of the training configuration (see Hash);
	// it is stable across machines and names the run's directory.
	ID   string `json:"id"`
	Slug string `json:"slug"`

	Sweep       string `json:"sweep"`
	Backend     string `json:"backend"`
	Launcher    string `json:"launcher"`
	Hardware    string `json:"hardware"`
	Model       string `json:"model"`
	SeqLen      int    `json:"seq_len"`
	Steps       int    `json:"steps"`
	WarmupSteps int    `json:"warmup_steps"`
	// Repeats is how many times the run is repeated; with RepeatsCI > 0 the most
	// (repeats: {min, max, ci}): the run stops after RepeatsMin or more repeats once
	// the 95% confidence interval of its median throughput is within ±RepeatsCI
	// (a fraction) of the median.
	Repeats    int      `json:"repeats"`
	RepeatsMin int      `json:"repeats_min,omitempty"`
	RepeatsCI  float64  `json:"repeats_ci,omitempty"`
	Timeout    Duration `json:"timeout"`
	Seed       int64    `json:"seed"`

	Nodes                   int    `json:"nodes"`
	GPUsPerNode             int    `json:"gpus_per_node"`
	WorldSize               int    `json:"world_size"`
	BatchPerDevice          int    `json:"batch_per_device"`
	GradAccum               int    `json:"grad_accum"`
	GlobalBatch             int    `json:"global_batch"`
	Sharding                string `json:"sharding"`
	ActivationCheckpointing bool   `json:"activation_checkpointing"`
	BackwardPrefetch        string `json:"backward_prefetch"`
	ForwardPrefetch         bool   `json:"forward_prefetch"`
	CPUOffload              bool   `json:"cpu_offload"`
	MixedPrecision          string `json:"mixed_precision"`
	WrapPolicy              string `json:"wrap_policy"`
	Compile                 bool   `json:"compile"`

	// Checkpoint is none, sharded or full; CheckpointEvery saves after every that
	// many measured steps; ResumeCheck reloads the first checkpoint into a fresh
	// trainer and compares the resumed losses with the uninterrupted ones. Empty
	// Checkpoint (a config stored before the axis) means none.
	Checkpoint      string `json:"checkpoint,omitempty"`
	CheckpointEvery int    `json:"checkpoint_every,omitempty"`
	ResumeCheck     bool   `json:"resume_check,omitempty"`

	BackendOptions  map[string]any `json:"backend_options,omitempty"`
	LauncherOptions map[string]any `json:"launcher_options,omitempty"`

	// Env holds the environment variables the spec gives the run (env:, and
	// env.NAME axes): every process of the run gets them on top of the
	// environment it inherits. They enter the ID when there are any.
	Env map[string]string `json:"env,omitempty"`
	// InputHashes holds the SHA-256 (hex) of the files that define what the run
	// trains, read when the spec is loaded: "model" (a config.json the model
	// axis names) and "backend_options.script" (a user's script). They enter
	// the ID (see workload.go), so editing the script or the model's file names
	// new runs; stored, they keep the ID reproducible from run_args.json.
	InputHashes map[string]string `json:"input_sha256,omitempty"`
	// OptionAxes names, sorted, the backend options the spec varies per point
	// (backend_options.NAME as a grid or include axis): their values, in
	// BackendOptions, enter the ID, so the points of such an axis are distinct
	// runs. Options given once for the whole sweep (backend_options:) stay out
	// of the ID, as they always have.
	OptionAxes []string `json:"option_axes,omitempty"`

	// Search names the axis searched adaptively for this point ("batch_per_device"
	// under search: max_fit); empty for a plain grid point. SearchGroup is the same
	// for every run of one search (the point of the other axes).
	Search      string `json:"search,omitempty"`
	SearchGroup string `json:"search_group,omitempty"`
	// SpecPaths holds, for each path the spec gave relative to its folder and
	// that the fields above hold resolved ("model", "backend_options.script"),
	// the value as written. IDs and fingerprints hash the values as written, so
	// a spec names the same runs from any directory; read-only, shared by runs.
	SpecPaths map[string]any `json:"spec_paths,omitempty"`
}

// writtenModel is the model as the spec wrote it: what IDs hash.
func (rc *RunConfig) writtenModel() string {
	if s, ok := rc.SpecPaths["model"].(string); ok {
		return s
	}
	return rc.Model
}

// writtenHardware is the hardware as the spec wrote it (a profile file's path
// relative to the spec): what IDs hash.
func (rc *RunConfig) writtenHardware() string {
	if s, ok := rc.SpecPaths["hardware"].(string); ok {
		return s
	}
	return rc.Hardware
}

// asWritten returns rc with the resolved paths put back as the spec wrote them
// and SpecPaths cleared: what a fingerprint hashes.
func (rc RunConfig) asWritten() RunConfig {
	if len(rc.SpecPaths) == 0 {
		rc.SpecPaths = nil
		return rc
	}
	rc.Model, rc.Hardware = rc.writtenModel(), rc.writtenHardware()
	for key, v := range rc.SpecPaths {
		for _, sec := range []struct {
			prefix string
			m      *map[string]any
		}{{"backend_options.", &rc.BackendOptions}, {"launcher_options.", &rc.LauncherOptions}} {
			if name, ok := strings.CutPrefix(key, sec.prefix); ok && *sec.m != nil {
				m := maps.Clone(*sec.m)
				m[name] = v
				*sec.m = m
			}
		}
	}
	rc.SpecPaths = nil
	return rc
}

// TokensPerStep is the number of tokens one optimizer step consumes across all ranks.
func (rc RunConfig) TokensPerStep() int64 {
	return int64(rc.GlobalBatch) * int64(rc.SeqLen)
}

// notInID lists the RunConfig fields a run ID leaves out, with why: none of
// them changes what one training step computes on which hardware. Every other
// field enters the ID, some in part (idPartly). TestIDFieldsClassified checks
// by reflection that the list names real fields, that changing a listed field
// keeps the ID and that changing any other field changes it; the property in
// property_ids_test.go checks the same over generated specs.
var notInID = map[string]string{
	"ID":          "the ID itself",
	"Slug":        "the readable part of the ID, made from fields that enter it",
	"Sweep":       "the sweep's name: one point in two sweeps is one run, compared across them",
	"Backend":     "the engine: gotrain and torchrun running the same built-in model share IDs, so compare pairs them (and says the backends differ)",
	"Launcher":    "where the processes start (local, slurm), not what they train; compare says when it differs",
	"Steps":       "how long the run is measured, not what a step does; the fingerprint holds it, so resume reruns a run whose steps changed",
	"WarmupSteps": "as Steps",
	"Repeats":     "how many times the run is measured; in the fingerprint",
	"RepeatsMin":  "as Repeats",
	"RepeatsCI":   "as Repeats",
	"Timeout":     "a limit on the run, not part of it",
	// Slurm's partition, account, time limit: where the processes start.
	"LauncherOptions": "where the processes start (Slurm's partition, account); in neither the ID nor the fingerprint",
	"Search":          "bookkeeping of a max_fit search: the point's axes are in the ID",
	"SearchGroup":     "as Search",
}

// idPartly lists the fields that enter the ID in part, with which part.
var idPartly = map[string]string{
	"CheckpointEvery": "only when Checkpoint is sharded or full: a run that saves no checkpoint reads neither it nor ResumeCheck",
	"ResumeCheck":     "as CheckpointEvery",
	"BackendOptions": "the option axes (OptionAxes) and, for a run of a program of the user's, programOptions (workload.go); " +
		"an option given once for the whole sweep configures the engine (lr, python, logs, the sim's calibration) and is in the fingerprint only",
	"SpecPaths": "as the written form of the paths it holds (model, hardware, backend_options.script): IDs hash paths as the spec wrote them",
}

// trainingKey is the part of a config that defines what is trained and measured on
// which hardware. Where and how it is launched (backend, launcher, timeout, repeats,
// sweep name, measurement length) is left out so that the same point run by two
// backends or two sweeps has the same ID and can be compared.
type trainingKey struct {
	Hardware                string `json:"hardware"`
	Model                   string `json:"model"`
	SeqLen                  int    `json:"seq_len"`
	Seed                    int64  `json:"seed"`
	Nodes                   int    `json:"nodes"`
	GPUsPerNode             int    `json:"gpus_per_node"`
	WorldSize               int    `json:"world_size"`
	BatchPerDevice          int    `json:"batch_per_device"`
	GradAccum               int    `json:"grad_accum"`
	GlobalBatch             int    `json:"global_batch"`
	Sharding                string `json:"sharding"`
	ActivationCheckpointing bool   `json:"activation_checkpointing"`
	BackwardPrefetch        string `json:"backward_prefetch"`
	ForwardPrefetch         bool   `json:"forward_prefetch"`
	CPUOffload              bool   `json:"cpu_offload"`
	MixedPrecision          string `json:"mixed_precision"`
	WrapPolicy              string `json:"wrap_policy"`
	Compile                 bool   `json:"compile"`
	// The checkpoint settings are present only when the run checkpoints, so
	// runs without checkpointing keep the IDs they had before the axis.
	Checkpoint      string `json:"checkpoint,omitempty"`
	CheckpointEvery int    `json:"checkpoint_every,omitempty"`
	ResumeCheck     *bool  `json:"resume_check,omitempty"`
	// Env and the varied backend options are present only when the run has
	// some, so runs without them keep their IDs.
	Env     map[string]string `json:"env,omitempty"`
	Options map[string]any    `json:"backend_options,omitempty"`
	// Workload is present only for a run of a program of the user's or of a
	// model file (workload.go), so runs of the built-in model keep their IDs.
	Workload map[string]any `json:"workload,omitempty"`
}

func (rc *RunConfig) trainingKey() trainingKey {
	k := trainingKey{Hardware: rc.writtenHardware(), Model: rc.writtenModel(), SeqLen: rc.SeqLen, Seed: rc.Seed, Nodes: rc.Nodes,
		GPUsPerNode: rc.GPUsPerNode, WorldSize: rc.WorldSize, BatchPerDevice: rc.BatchPerDevice,
		GradAccum: rc.GradAccum, GlobalBatch: rc.GlobalBatch, Sharding: rc.Sharding,
		ActivationCheckpointing: rc.ActivationCheckpointing, BackwardPrefetch: rc.BackwardPrefetch,
		ForwardPrefetch: rc.ForwardPrefetch, CPUOffload: rc.CPUOffload,
		MixedPrecision: rc.MixedPrecision, WrapPolicy: rc.WrapPolicy, Compile: rc.Compile}
	if rc.Checkpoints() {
		rcheck := rc.ResumeCheck
		k.Checkpoint, k.CheckpointEvery, k.ResumeCheck = rc.Checkpoint, rc.CheckpointEvery, &rcheck
	}
	if len(rc.Env) > 0 {
		k.Env = rc.Env
	}
	k.Options = rc.axisOptions()
	k.Workload = rc.workloadKey()
	return k
}

// axisOptions is the varied backend options with their values (nil when none).
func (rc *RunConfig) axisOptions() map[string]any {
	if len(rc.OptionAxes) == 0 {
		return nil
	}
	m := make(map[string]any, len(rc.OptionAxes))
	for _, k := range rc.OptionAxes {
		m[k] = rc.BackendOptions[k]
	}
	if w := rc.asWritten().BackendOptions; w != nil {
		for k := range m {
			m[k] = w[k]
		}
	}
	return m
}

// appendEnvKey appends the env and varied options parts of the training key
// (nothing for a run without them). encoding/json writes map keys sorted, so the
// bytes are the same as the struct's.
func (rc *RunConfig) appendEnvKey(b []byte) []byte {
	if len(rc.Env) > 0 {
		j, _ := json.Marshal(rc.Env) // strings always marshal
		b = append(b, `,"env":`...)
		b = append(b, j...)
	}
	if o := rc.axisOptions(); o != nil {
		j, err := json.Marshal(o)
		if err != nil {
			j = []byte(strconv.Quote(fmt.Sprint(o)))
		}
		b = append(b, `,"backend_options":`...)
		b = append(b, j...)
	}
	return b
}

// HashBytes is how many bytes of SHA-256 a run ID carries: 64 bits, so a grid of
// MaxRuns points has about one chance in 30 million of two points sharing a slug
// and a hash (expansion refuses that case rather than mix two runs). IDs written
// before issue 13 carried 4 bytes (LegacyHashBytes), which collided for real in a
// 300,000-point grid.
const (
	HashBytes       = 8
	LegacyHashBytes = 4
)

// Hash is a short hex hash of the training configuration (not of how it is launched):
// the first HashBytes bytes of the SHA-256 of trainingKey's JSON encoding (fields
// in declaration order, as encoding/json writes them). appendTrainingKey writes
// those bytes by hand because expanding a large grid hashes every point; the bytes
// are the same as json.Marshal(trainingKey{...}) (TestHashMatchesJSON checks), so
// IDs do not depend on the Go version's JSON encoder beyond its documented format.
func (rc RunConfig) Hash() string {
	var buf [512]byte
	sum := sha256.Sum256(rc.appendTrainingKey(buf[:0]))
	return hex.EncodeToString(sum[:HashBytes])
}

// LegacyID is the ID fsdpbench gave rc before IDs carried 64 bits of hash: the
// same slug and the first LegacyHashBytes of the same SHA-256. Results stored then
// live under it; MigrateID and the resume path map them to the current ID.
func (rc RunConfig) LegacyID() string {
	var buf [512]byte
	// Legacy IDs predate the workload part of the key (WorkloadIDChange).
	sum := sha256.Sum256(rc.appendKey(buf[:0], false))
	return rc.MakeSlug() + "-" + hex.EncodeToString(sum[:LegacyHashBytes])
}

// MigrateID gives a stored config written with a legacy ID (LegacyID) its current
// ID and slug, so a run stored before IDs grew still matches the same point of a
// new sweep. Any other ID is left as stored. It reports whether it changed rc.
func (rc *RunConfig) MigrateID() bool {
	if rc.ID == "" || len(rc.ID) != len(rc.MakeSlug())+1+2*LegacyHashBytes || rc.ID != rc.LegacyID() {
		return false
	}
	rc.AssignID()
	return true
}

// appendTrainingKey appends the JSON encoding of rc's trainingKey to b.
func (rc *RunConfig) appendTrainingKey(b []byte) []byte { return rc.appendKey(b, true) }

// appendKey is appendTrainingKey, with the workload part when workload is
// true (false: the key IDs hashed before WorkloadIDChange).
func (rc *RunConfig) appendKey(b []byte, workload bool) []byte {
	b = append(b, `{"hardware":`...)
	b = appendJSONString(b, rc.writtenHardware())
	b = append(b, `,"model":`...)
	b = appendJSONString(b, rc.writtenModel())
	b = append(b, `,"seq_len":`...)
	b = strconv.AppendInt(b, int64(rc.SeqLen), 10)
	b = append(b, `,"seed":`...)
	b = strconv.AppendInt(b, rc.Seed, 10)
	b = append(b, `,"nodes":`...)
	b = strconv.AppendInt(b, int64(rc.Nodes), 10)
	b = append(b, `,"gpus_per_node":`...)
	b = strconv.AppendInt(b, int64(rc.GPUsPerNode), 10)
	b = append(b, `,"world_size":`...)
	b = strconv.AppendInt(b, int64(rc.WorldSize), 10)
	b = append(b, `,"batch_per_device":`...)
	b = strconv.AppendInt(b, int64(rc.BatchPerDevice), 10)
	b = append(b, `,"grad_accum":`...)
	b = strconv.AppendInt(b, int64(rc.GradAccum), 10)
	b = append(b, `,"global_batch":`...)
	b = strconv.AppendInt(b, int64(rc.GlobalBatch), 10)
	b = append(b, `,"sharding":`...)
	b = appendJSONString(b, rc.Sharding)
	b = append(b, `,"activation_checkpointing":`...)
	b = strconv.AppendBool(b, rc.ActivationCheckpointing)
	b = append(b, `,"backward_prefetch":`...)
	b = appendJSONString(b, rc.BackwardPrefetch)
	b = append(b, `,"forward_prefetch":`...)
	b = strconv.AppendBool(b, rc.ForwardPrefetch)
	b = append(b, `,"cpu_offload":`...)
	b = strconv.AppendBool(b, rc.CPUOffload)
	b = append(b, `,"mixed_precision":`...)
	b = appendJSONString(b, rc.MixedPrecision)
	b = append(b, `,"wrap_policy":`...)
	b = appendJSONString(b, rc.WrapPolicy)
	b = append(b, `,"compile":`...)
	b = strconv.AppendBool(b, rc.Compile)
	b = rc.appendCheckpointKey(b)
	b = rc.appendEnvKey(b)
	if workload {
		b = rc.appendWorkloadKey(b)
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it. Plain printable ASCII (every
// canonical value) is copied; anything encoding/json would escape goes through it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Fingerprint hashes everything that affects a run's outcome, including the backend,
// its options and the measurement length. Resume reruns a stored run whose fingerprint
// differs from the spec's, so editing `steps` or a backend option is never ignored.
func (rc RunConfig) Fingerprint() string {
	c := rc.asWritten()
	c.ID, c.Slug, c.Sweep, c.Timeout, c.Launcher, c.LauncherOptions = "", "", "", 0, "", nil
	if !c.Checkpoints() {
		// Runs stored before the checkpoint axis keep their fingerprint.
		c.Checkpoint, c.CheckpointEvery, c.ResumeCheck = "", 0, false
	}
	b, err := json.Marshal(c)
	if err != nil {
		// backend_options came from YAML, so they marshal; keep going with what we have.
		b = []byte(fmt.Sprint(c))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// MakeSlug builds the readable part of a run ID, e.g. "ws4-bs2-full_shard-ac1-pre".
// It is a fixed function of the config (not of which axes vary), so IDs are stable.
func (rc RunConfig) MakeSlug() string {
	var buf [96]byte
	return string(rc.appendSlug(buf[:0]))
}

func (rc *RunConfig) appendSlug(b []byte) []byte {
	b = append(b, "ws"...)
	b = strconv.AppendInt(b, int64(rc.WorldSize), 10)
	if rc.Nodes > 1 {
		b = append(b, "-n"...)
		b = strconv.AppendInt(b, int64(rc.Nodes), 10)
	}
	b = append(b, "-bs"...)
	b = strconv.AppendInt(b, int64(rc.BatchPerDevice), 10)
	if rc.GradAccum > 1 {
		b = append(b, "-ga"...)
		b = strconv.AppendInt(b, int64(rc.GradAccum), 10)
	}
	b = append(b, '-')
	b = append(b, rc.Sharding...)
	b = append(b, "-ac"...)
	b = append(b, b01(rc.ActivationCheckpointing)...)
	switch rc.BackwardPrefetch {
	case BackwardPre:
		b = append(b, "-pre"...)
	case BackwardPost:
		b = append(b, "-post"...)
	default:
		b = append(b, "-nopf"...)
	}
	if rc.ForwardPrefetch {
		b = append(b, "-fwdpf"...)
	}
	if rc.CPUOffload {
		b = append(b, "-offload"...)
	}
	if rc.MixedPrecision != "" && rc.MixedPrecision != BF16 {
		b = append(b, '-')
		b = append(b, rc.MixedPrecision...)
	}
	return rc.appendCheckpointSlug(b)
}

// AssignID fills Slug and ID from the config.
func (rc *RunConfig) AssignID() { rc.assignID() }

// assignID is AssignID, returning the hash's 64 bits for the caller's index. Slug
// shares ID's memory (one allocation per run), which matters when a grid has a
// million points.
func (rc *RunConfig) assignID() uint64 {
	var buf [160]byte
	b := rc.appendSlug(buf[:0])
	n := len(b)
	var kb [512]byte
	sum := sha256.Sum256(rc.appendTrainingKey(kb[:0]))
	b = append(b, '-')
	b = hex.AppendEncode(b, sum[:HashBytes])
	rc.ID = string(b)
	rc.Slug = rc.ID[:n]
	return binary.BigEndian.Uint64(sum[:HashBytes])
}

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
