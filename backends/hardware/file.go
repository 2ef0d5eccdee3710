package hardware

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// A user-defined profile is a YAML file named where a profile name goes
// (hardware: ./my-gpu.yaml): a GPU this table does not know, or a known one
// with measured figures. See examples/hardware/my-gpu.yaml.

// IsFile reports whether a hardware value names a profile file rather than a
// built-in profile: it ends in .yaml or .yml.
func IsFile(name string) bool {
	l := strings.ToLower(name)
	return strings.HasSuffix(l, ".yaml") || strings.HasSuffix(l, ".yml")
}

// fileLimits bound a profile file before it is parsed: a dozen keys.
var fileLimits = input.Limits{What: "hardware profile", MaxBytes: 64 << 10, MaxDepth: 4, MaxValues: 1000,
	MaxAliases: 100, MaxKeys: 100, MaxTokens: 10_000}

// Bounds of a profile file's figures. Each is wide enough for any GPU sold or
// announced (a B200's dense FP8 is 4,500 TFLOP/s; the largest device memory is
// 288 GB) and tight enough that a unit slip (bytes for GiB, TB/s for GB/s)
// fails here instead of predicting nonsense.
const (
	minPeakTFLOPS, maxPeakTFLOPS = 0.01, 100_000
	minMemGiB, maxMemGiB         = 0.25, 16_384
	minBWGBps, maxBWGBps         = 0.01, 100_000
	minFileEfficiency            = 0.001
)

// filePrecisions are the precisions a file may give a peak for.
var filePrecisions = []string{"bf16", "fp16", "fp32", "tf32", "fp8"}

// fileKey is one key of a profile file.
type fileKey struct {
	name, help string
	required   bool
	lo, hi     float64
	set        func(p *Profile, v float64)
}

var fileKeys = []fileKey{
	{name: "memory_gib", help: "device memory per GPU, GiB as nvidia-smi's memory.total shows it (MiB / 1024)", required: true,
		lo: minMemGiB, hi: maxMemGiB, set: func(p *Profile, v float64) { p.MemBytes = int64(math.Round(v * (1 << 30))) }},
	{name: "gpus_per_node", help: "GPUs in one node, joined by the intra-node fabric", required: true,
		lo: 1, hi: sweeps.MaxGPUsPerNode, set: func(p *Profile, v float64) { p.GPUsPerNode = int(v) }},
	{name: "intra_node_bus_bw_gbps", help: "collective bus bandwidth inside a node, GB/s (nccl-tests busbw at large sizes; NVLink 4 ≈ 450)", required: true,
		lo: minBWGBps, hi: maxBWGBps, set: func(p *Profile, v float64) { p.IntraNodeBusBWBytesPerS = v * giga }},
	{name: "inter_node_bus_bw_gbps", help: "collective bus bandwidth across nodes, GB/s (nccl-tests busbw; default 25, one 200 Gb/s NIC)",
		lo: minBWGBps, hi: maxBWGBps, set: func(p *Profile, v float64) { p.InterNodeBusBWBytesPerS = v * giga }},
	{name: "memory_bw_gbps", help: "device memory bandwidth, GB/s (default 2000): the optimizer step's speed",
		lo: minBWGBps, hi: maxBWGBps, set: func(p *Profile, v float64) { p.MemBWBytesPerS = v * giga }},
	{name: "host_link_bw_gbps", help: "device↔host bandwidth per direction, GB/s (default 32, PCIe Gen4 x16): CPU offload's copies",
		lo: minBWGBps, hi: maxBWGBps, set: func(p *Profile, v float64) { p.HostLinkBWBytesPerS = v * giga }},
	{name: "efficiency", help: "fraction of peak a training step's matmuls reach (default 0.55, the H100 profiles'); attention and elementwise kernels are added at this efficiency and at memory_bw_gbps",
		lo: minFileEfficiency, hi: 1, set: func(p *Profile, v float64) { p.Efficiency = v }},
	{name: "attention_efficiency", help: "fraction of peak flash attention reaches, in model FLOPs at long sequences (default: efficiency; the H100 profiles' 0.30, the A100s' 0.55)",
		lo: minFileEfficiency, hi: 1, set: func(p *Profile, v float64) { p.AttentionEfficiency = v }},
	{name: "attention_half_seq", help: "sequence length at which flash attention runs at half its attention_efficiency, which it approaches at long sequences (default 0: the same rate at every length; the built-in GPU profiles' 2048)",
		lo: 0, hi: sweeps.MaxSeqLen, set: func(p *Profile, v float64) { p.AttentionHalfSeq = v }},
}

// fileKeyNames are the keys a profile file accepts, sorted.
func fileKeyNames() []string {
	names := []string{"name", "peak_tflops"}
	for _, k := range fileKeys {
		names = append(names, k.name)
	}
	sort.Strings(names)
	return names
}

var safeProfileName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// fileCache keeps parsed files by path, size and modification time: a
// recommendation looks its hardware up once per candidate.
var fileCache sync.Map // path → cachedFile

type cachedFile struct {
	size int64
	mod  time.Time
	p    Profile
	err  error
}

// LoadFile reads a user-defined hardware profile. Errors name the file, and
// for a bad key or value its line and column (path:line:col: ...), what was
// expected and the bounds.
func LoadFile(path string) (Profile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Profile{}, fmt.Errorf("hardware profile file %s: %w (a path in a spec is relative to the spec's folder)", path, err)
	}
	if c, ok := fileCache.Load(path); ok {
		if c := c.(cachedFile); c.size == st.Size() && c.mod.Equal(st.ModTime()) {
			return clone(c.p), c.err
		}
	}
	p, err := loadFile(path)
	fileCache.Store(path, cachedFile{size: st.Size(), mod: st.ModTime(), p: p, err: err})
	return clone(p), err
}

func loadFile(path string) (Profile, error) {
	data, err := input.ReadYAML(path, fileLimits)
	if err != nil {
		return Profile{}, err
	}
	f, err := parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey()) // duplicates: ours, below
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil {
			tk := ye.GetToken()
			return Profile{}, &input.Error{Path: path, Line: tk.Position.Line, Column: tk.Position.Column, Msg: ye.GetMessage()}
		}
		return Profile{}, fmt.Errorf("%s: %w", path, err)
	}
	var body ast.Node
	if len(f.Docs) > 0 && f.Docs[0] != nil {
		body = f.Docs[0].Body
	}
	at := func(n ast.Node, format string, args ...any) error {
		e := &input.Error{Path: path, Msg: fmt.Sprintf(format, args...)}
		if n != nil && n.GetToken() != nil {
			e.Line, e.Column = n.GetToken().Position.Line, n.GetToken().Position.Column
		}
		return e
	}
	m, ok := body.(*ast.MappingNode)
	if !ok {
		return Profile{}, at(body, "a hardware profile is a mapping of %s, e.g. examples/hardware/my-gpu.yaml", strings.Join(fileKeyNames(), ", "))
	}
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	p := Profile{Name: base, PeakFLOPS: map[string]float64{}, MemBWBytesPerS: 2000 * giga,
		InterNodeBusBWBytesPerS: defaultInterNodeBusBW, InterNodeDefault: true, HostLinkBWBytesPerS: 32 * giga,
		Efficiency: gpuEfficiency, IsGPU: true, File: path}
	seen := map[string]bool{}
	for _, kv := range m.Values {
		key := kv.Key.String()
		if seen[key] {
			return Profile{}, at(kv.Key, "%s is given twice", key)
		}
		seen[key] = true
		switch key {
		case "name":
			s, ok := kv.Value.(*ast.StringNode)
			if !ok || !safeProfileName.MatchString(s.Value) || IsFile(s.Value) || slices.Contains(Names(), s.Value) || s.Value == Auto {
				return Profile{}, at(kv.Value, "name must be a new profile name (letters, digits, '.', '_', '-', at most 64), not a built-in one (%s), got %s",
					strings.Join(Names(), ", "), input.Quote(kv.Value.String(), 40))
			}
			p.Name = s.Value
		case "peak_tflops":
			pm, ok := kv.Value.(*ast.MappingNode)
			if !ok {
				return Profile{}, at(kv.Value, "peak_tflops must map precisions (%s) to dense TFLOP/s (no 2:4 sparsity), e.g. {bf16: 312, fp32: 19.5}", strings.Join(filePrecisions, ", "))
			}
			for _, pkv := range pm.Values {
				prec := pkv.Key.String()
				if !slices.Contains(filePrecisions, prec) {
					return Profile{}, at(pkv.Key, "peak_tflops.%s: unknown precision%s; known: %s", prec, suggest(prec, filePrecisions), strings.Join(filePrecisions, ", "))
				}
				v, err := number(pkv.Value, minPeakTFLOPS, maxPeakTFLOPS)
				if err != "" {
					return Profile{}, at(pkv.Value, "peak_tflops.%s: %s (dense TFLOP/s)", prec, err)
				}
				p.PeakFLOPS[prec] = v * tera
			}
		default:
			i := slices.IndexFunc(fileKeys, func(k fileKey) bool { return k.name == key })
			if i < 0 {
				return Profile{}, at(kv.Key, "unknown key %s%s; a hardware profile has %s", input.Quote(key, 40), suggest(key, fileKeyNames()), strings.Join(fileKeyNames(), ", "))
			}
			k := fileKeys[i]
			v, err := number(kv.Value, k.lo, k.hi)
			if err == "" && k.name == "gpus_per_node" && v != math.Trunc(v) {
				err = fmt.Sprintf("must be a whole number, got %v", v)
			}
			if err != "" {
				return Profile{}, at(kv.Value, "%s: %s (%s)", key, err, k.help)
			}
			k.set(&p, v)
			if k.name == "inter_node_bus_bw_gbps" {
				p.InterNodeDefault = false
			}
		}
	}
	if _, ok := p.PeakFLOPS["bf16"]; !ok {
		return Profile{}, at(m, "peak_tflops.bf16 is required (the default precision): the dense bf16 TFLOP/s of one GPU")
	}
	for _, k := range fileKeys {
		if k.required && !seen[k.name] {
			return Profile{}, at(m, "%s is required: %s", k.name, k.help)
		}
	}
	return p, nil
}

// coreFloat is YAML 1.2's core schema float (without .inf and .nan), as the
// sweep spec reads it (sweeps/tree.go).
var coreFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// number reads a YAML number within [lo, hi]; the message says what is wrong.
func number(n ast.Node, lo, hi float64) (float64, string) {
	var v float64
	switch x := n.(type) {
	case *ast.IntegerNode:
		switch i := x.Value.(type) {
		case int64:
			v = float64(i)
		case uint64:
			v = float64(i)
		default:
			return 0, fmt.Sprintf("must be a number, got %s", input.Quote(n.String(), 40))
		}
	case *ast.FloatNode:
		v = x.Value
	default:
		if n != nil && n.GetToken() != nil && n.GetToken().Type == token.StringType {
			// YAML 1.2's core schema reads an unquoted 4e1 or 6e-1 as a float;
			// goccy/go-yaml reads it as a string. Follow the schema, as the sweep
			// spec does, so a figure means the same in a profile and in a spec.
			text := n.GetToken().Value
			f, err := strconv.ParseFloat(text, 64)
			if !coreFloat.MatchString(text) || (err != nil && !errors.Is(err, strconv.ErrRange)) {
				return 0, fmt.Sprintf("must be a number, got the string %s", input.Quote(n.String(), 40))
			}
			v = f // past float64 (1e999): ±Inf, refused by the range below
			break
		}
		if n != nil && n.GetToken() != nil && (n.GetToken().Type == token.DoubleQuoteType || n.GetToken().Type == token.SingleQuoteType) {
			return 0, fmt.Sprintf("must be a number, got the quoted string %s (a number is written without quotes)", input.Quote(n.GetToken().Value, 40))
		}
		return 0, fmt.Sprintf("must be a number, got %s", input.Quote(fmt.Sprint(n), 40))
	}
	if !(v >= lo && v <= hi) { // NaN too
		return 0, fmt.Sprintf("%v is out of range [%g, %g]", v, lo, hi)
	}
	return v, ""
}

func suggest(s string, known []string) string {
	if c := sweeps.Closest(s, known); c != "" {
		return fmt.Sprintf(" (did you mean %s?)", c)
	}
	return ""
}
