package sim

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/fsdpbench/fsdpbench/backends/shapes"
)

// module is a node of a model's nn.Module tree, with only what FSDP's auto-wrap
// policies look at: how many parameters it holds directly, its children, and
// whether it is a container that size-based wrapping never wraps (nn.ModuleList).
type module struct {
	own      int64
	children []*module
	list     bool
	block    bool // a transformer layer: the unit of the transformer wrap policy
}

func (m *module) total() int64 {
	n := m.own
	for _, c := range m.children {
		n += c.total()
	}
	return n
}

func leaf(n int64) *module { return &module{own: n} }

// moduleTree builds the module tree Hugging Face's modeling code creates for s
// (LlamaForCausalLM / GPT2LMHeadModel). A tied LM head shares the embedding's
// parameter, which FSDP flattens once, so the head module holds none of its own.
func moduleTree(s shapes.Shape) *module {
	h, kv, in, v := int64(s.Hidden), int64(s.KVDim()), int64(s.Intermediate), int64(s.Vocab)
	head := leaf(0)
	if !s.TiedEmbeddings {
		head = leaf(v * h)
	}
	layers := &module{list: true}
	for range s.Layers {
		var blk *module
		if s.Arch == shapes.ArchGPT2 {
			blk = &module{block: true, children: []*module{
				leaf(2 * h), // ln_1
				{children: []*module{leaf(h*3*h + 3*h), leaf(h*h + h)}}, // attn: c_attn, c_proj
				leaf(2 * h), // ln_2
				{children: []*module{leaf(h*in + in), leaf(in*h + h)}}, // mlp: c_fc, c_proj
			}}
		} else {
			bias := func(on bool, n int64) int64 {
				if on {
					return n
				}
				return 0
			}
			blk = &module{block: true, children: []*module{
				{children: []*module{ // self_attn: q, k, v, o
					leaf(h*h + bias(s.QKVBias, h)), leaf(h*kv + bias(s.QKVBias, kv)),
					leaf(h*kv + bias(s.QKVBias, kv)), leaf(h*h + bias(s.OutBias, h)),
				}},
				{children: []*module{ // mlp: gate, up, down
					leaf(h*in + bias(s.MLPBias, in)), leaf(h*in + bias(s.MLPBias, in)), leaf(in*h + bias(s.MLPBias, h)),
				}},
				leaf(h), leaf(h), // input_layernorm, post_attention_layernorm
			}}
		}
		layers.children = append(layers.children, blk)
	}
	var body *module
	if s.Arch == shapes.ArchGPT2 {
		body = &module{children: []*module{leaf(v * h), leaf(int64(s.MaxPositions) * h), layers, leaf(2 * h)}}
	} else {
		body = &module{children: []*module{leaf(v * h), layers, leaf(h)}}
	}
	return &module{children: []*module{body, head}}
}

// wrapUnits is how FSDP splits a model into units that are gathered and freed
// together: the root unit (whatever no policy wrapped: the embeddings, final norm
// and head under the transformer policy) and the others, in parameters.
type wrapUnits struct {
	Root  int64
	Units []int64
}

// MaxUnit is the largest non-root unit (0 when the root holds everything).
func (w wrapUnits) MaxUnit() int64 {
	var m int64
	for _, u := range w.Units {
		m = max(m, u)
	}
	return m
}

// Wrap policies (the wrap_policy axis).
const (
	WrapTransformer = "transformer"
	wrapSizePrefix  = "size:"
)

// parseWrapPolicy reads "transformer" (also the default, "") or "size:<min params>".
func parseWrapPolicy(p string) (minParams int64, transformer bool, err error) {
	if p == "" || p == WrapTransformer {
		return 0, true, nil
	}
	num, ok := strings.CutPrefix(p, wrapSizePrefix)
	if ok {
		n, perr := strconv.ParseInt(num, 10, 64)
		if perr == nil && n > 0 {
			return n, false, nil
		}
	}
	return 0, false, fmt.Errorf("wrap_policy %q: want transformer or size:<min params> (a positive integer)", p)
}

// units applies a wrap policy to the tree. The transformer policy wraps every
// transformer layer (transformer_auto_wrap_policy with the decoder-layer class).
// size:<n> is PyTorch's size_based_auto_wrap_policy with min_num_params = n, applied
// as torch.distributed.fsdp.wrap._recursive_wrap does: a module is recursed into
// only if it holds at least n parameters, children are wrapped first, and the
// module itself is wrapped if what its children left unwrapped is still at least n
// and it is not a ModuleList (the policy's exclude_wrap_modules). The root always
// becomes a unit of its own with whatever is left.
func (m *module) units(policy string) (wrapUnits, error) {
	minParams, transformer, err := parseWrapPolicy(policy)
	if err != nil {
		return wrapUnits{}, err
	}
	var w wrapUnits
	if transformer {
		var walk func(*module)
		walk = func(n *module) {
			for _, c := range n.children {
				if c.block {
					w.Units = append(w.Units, c.total())
				} else {
					walk(c)
				}
			}
		}
		walk(m)
	} else if m.total() >= minParams {
		for _, c := range m.children {
			u, _ := sizeWrap(c, minParams)
			w.Units = append(w.Units, u...)
		}
	}
	w.Root = m.total()
	for _, u := range w.Units {
		w.Root -= u
	}
	return w, nil
}

// unitsFor is moduleTree(s).units(policy), without building the tree for the
// transformer policy, whose units follow from the shape: a unit per layer.
func unitsFor(s shapes.Shape, policy string) (wrapUnits, error) {
	if _, transformer, err := parseWrapPolicy(policy); err != nil || !transformer {
		return sizeUnits(s, policy)
	}
	w := wrapUnits{Units: make([]int64, s.Layers)}
	for i := range w.Units {
		w.Units[i] = s.BlockParams()
	}
	w.Root = s.Params() - int64(s.Layers)*s.BlockParams()
	return w, nil
}

// sizeWrap returns the units wrapped inside m and how many parameters they hold.
func sizeWrap(m *module, minParams int64) (units []int64, wrapped int64) {
	total := m.total()
	if total < minParams {
		return nil, 0
	}
	for _, c := range m.children {
		u, w := sizeWrap(c, minParams)
		units = append(units, u...)
		wrapped += w
	}
	if rest := total - wrapped; rest >= minParams && !m.list {
		return append(units, rest), total
	}
	return units, wrapped
}

// unitsCache holds moduleTree(s).units(policy) by shape and policy: building
// the tree allocates a module per parameter tensor, and a prediction asks
// again for each alternative its verdict weighs, so `plan` of a grid with
// size policies spent most of its time there. The units are read, never
// changed, by the model.
var unitsCache struct {
	sync.Mutex
	m map[unitsKey]unitsResult
}

type unitsKey struct {
	shape  shapes.Shape
	policy string
}

type unitsResult struct {
	w   wrapUnits
	err error
}

// unitsCacheMax bounds unitsCache (a few hundred bytes an entry): past it
// the cache starts over.
const unitsCacheMax = 1 << 10

// sizeUnits is moduleTree(s).units(policy), cached.
func sizeUnits(s shapes.Shape, policy string) (wrapUnits, error) {
	k := unitsKey{s, policy}
	unitsCache.Lock()
	r, ok := unitsCache.m[k]
	unitsCache.Unlock()
	if ok {
		return r.w, r.err
	}
	w, err := moduleTree(s).units(policy)
	unitsCache.Lock()
	if unitsCache.m == nil || len(unitsCache.m) >= unitsCacheMax {
		unitsCache.m = map[unitsKey]unitsResult{}
	}
	unitsCache.m[k] = unitsResult{w, err}
	unitsCache.Unlock()
	return w, err
}
