package sim

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Collective names, as nccl-tests' binaries are named without "_perf".
const (
	AllGather     = "all_gather"
	ReduceScatter = "reduce_scatter"
	AllReduce     = "all_reduce"
)

// CurvePoint is one row of nccl-tests output: the message size (nccl-tests'
// "size" column: the whole buffer) and the bus bandwidth reached, in bytes/s.
type CurvePoint struct {
	SizeBytes float64 `json:"size_bytes"`
	BusBW     float64 `json:"bus_bw_bytes_per_s"`
}

// Curve is busbw against message size, sorted by size: nccl-tests' busbw is low
// for small messages (latency bound) and levels off at the link's bandwidth.
type Curve []CurvePoint

// At is the busbw at size bytes: linear in log(size) between the two nearest
// points, the end point's value outside the measured range.
func (c Curve) At(size float64) float64 {
	if len(c) == 0 {
		return 0
	}
	i := sort.Search(len(c), func(i int) bool { return c[i].SizeBytes >= size })
	switch {
	case i == 0:
		return c[0].BusBW
	case i == len(c):
		return c[len(c)-1].BusBW
	}
	lo, hi := c[i-1], c[i]
	if hi.SizeBytes == lo.SizeBytes {
		return hi.BusBW
	}
	t := (math.Log(size) - math.Log(lo.SizeBytes)) / (math.Log(hi.SizeBytes) - math.Log(lo.SizeBytes))
	return lo.BusBW + t*(hi.BusBW-lo.BusBW)
}

// Link is the busbw curves of one scope (inside a node, or across nodes), by
// collective. A collective without a curve falls back to all_reduce's, then to the
// hardware profile's flat figure.
type Link map[string]Curve

// curve returns the curve for a collective, or nil.
func (l Link) curve(coll string) Curve {
	if c, ok := l[coll]; ok {
		return c
	}
	return l[AllReduce]
}

// Links are the curves that replace the hardware profile's flat bus bandwidths.
type Links struct {
	Intra Link `json:"intra,omitempty"`
	Inter Link `json:"inter,omitempty"`
}

// busBW is the bus bandwidth of a collective of size bytes in a scope: the curve's
// value where there is one, flat otherwise.
func (l Links) busBW(inter bool, coll string, size, flat float64) float64 {
	link := l.Intra
	if inter {
		link = l.Inter
	}
	if c := link.curve(coll); len(c) > 0 {
		return c.At(size)
	}
	return flat
}

// alphaBeta builds a curve from the latency–bandwidth model nccl-tests' output
// follows: a collective of s bytes takes α + s·f/B, so busbw = s·f / (α + s·f/B),
// with f = 1 for the sizes' scale (busbw already divides f out). Points at every
// power of 4 from 1 KiB to 8 GiB, the range nccl-tests sweeps with -b/-e.
func alphaBeta(alphaS, peak float64) Curve {
	var c Curve
	for s := float64(1 << 10); s <= 8<<30; s *= 4 {
		c = append(c, CurvePoint{SizeBytes: s, BusBW: s / (alphaS + s/peak)})
	}
	return c
}

// fabric is a named interconnect profile.
type fabric struct {
	name, help string
	link       Link
}

// fabrics are the interconnect profiles, from published nccl-tests figures at
// large messages (8 GiB); the small-message end follows alphaBeta with the
// latency given, an assumption (nccl-tests reports a few tens of µs for small
// collectives on these fabrics) until a user's own nccl-tests output replaces it.
// Where only all_reduce is published, all_gather and reduce_scatter use the same
// curve (busbw normalizes the algorithm's factor away, so ring collectives reach
// the same busbw on the same links; NVLink SHARP all-reduce can exceed it).
var fabrics = []fabric{
	{
		name: "nvlink4-8gpu",
		// 8 × H100 SXM5, NVLink 4 through NVSwitch: all_reduce_perf -b 8 -e 8G -g 8
		// busbw 460–480 GB/s at large sizes ("NCCL-tests in practice", Alaya NeW,
		// docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests). 460 taken.
		help: "8 × H100 SXM NVLink 4 node: busbw 460 GB/s at 8 GiB",
		link: uniform(alphaBeta(20e-6, 460e9)),
	},
	{
		name: "nvlink3-8gpu",
		// 8 × A100 SXM4, NVLink 3: all_reduce busbw 230–250 GB/s (same source).
		help: "8 × A100 SXM NVLink 3 node: busbw 230 GB/s at 8 GiB",
		link: uniform(alphaBeta(20e-6, 230e9)),
	},
	{
		name: "ib-rail-8x400g",
		// H100 SXM nodes with NVLink and 8 × 400 Gb/s InfiniBand NDR, rail-optimized:
		// all_reduce_perf across nodes busbw 400–450 GB/s at 8 GB+ ("Validating
		// Multi-Node GPU Clusters with NCCL Tests", Saturn Cloud,
		// saturncloud.io/blog/crusoe-nccl-cluster-validation). 400 taken: far above
		// one NIC's 50 GB/s, because NCCL runs one ring per rail and busbw is per rank.
		help: "rail-optimized InfiniBand/RoCE, 8 × 400 Gb/s per node: all_reduce busbw 400 GB/s at 8 GiB across nodes, all_gather and reduce_scatter 360",
		link: railLink(400e9, 400e9),
	},
	{
		name: "ib-rail-8x200g",
		// A100 SXM nodes with 8 × 200 Gb/s InfiniBand HDR: all_reduce busbw 250–300
		// GB/s at 8 GB+ (Saturn Cloud, same page). 250 taken for all_reduce; the
		// ring collectives FSDP runs stay under the rails' 200 GB/s (railLink).
		help: "rail-optimized InfiniBand/RoCE, 8 × 200 Gb/s per node: all_reduce busbw 250 GB/s at 8 GiB across nodes, all_gather and reduce_scatter 180",
		link: railLink(250e9, 200e9),
	},
	{
		name: "tcp",
		// Plain TCP/Ethernet between nodes (InfiniBand disabled, as in the seeds'
		// two-node run): "a few GB/s" (FACTS.md); 3 GB/s, with socket latency.
		help: "plain TCP between nodes: busbw 3 GB/s",
		link: uniform(alphaBeta(200e-6, 3e9)),
	},
}

// railLink is a rail-optimized fabric across nodes: all_reduce at its
// measured busbw, which NCCL's tree (and SHARP) algorithms can lift above the
// rails' line rate, and all_gather and reduce_scatter, which NCCL runs as rings
// only (one per rail), at railRingShare of the line rate (the rails' NICs
// together, bytes/s): a ring's busbw is its slowest link's, and a node's
// rails are that link. Taking all_reduce's figure for them (as this profile
// once did, 250 GB/s on 8 × 200 Gb/s) predicts FSDP's collectives across
// nodes faster than the wire.
func railLink(allReduce, lineRate float64) Link {
	ring := alphaBeta(50e-6, railRingShare*lineRate)
	return Link{AllGather: ring, ReduceScatter: ring, AllReduce: alphaBeta(50e-6, allReduce)}
}

// railRingShare is the part of the rails' line rate a ring all_gather or
// reduce_scatter reaches at large messages: an assumption, the optimistic end
// of what rings reach on NVLink 3 (230–250 of 300 GB/s, above: 0.77–0.83); no
// nccl-tests figure of all_gather across these rails was found.
const railRingShare = 0.9

// uniform is a Link with one curve for every collective.
func uniform(c Curve) Link {
	return Link{AllGather: c, ReduceScatter: c, AllReduce: c}
}

// FabricNames lists the interconnect profiles, sorted.
func FabricNames() []string {
	names := make([]string, 0, len(fabrics))
	for _, f := range fabrics {
		names = append(names, f.name)
	}
	sort.Strings(names)
	return names
}

// Fabric returns the named profile's curves, or an error listing the profiles.
func Fabric(name string) (Link, error) {
	for _, f := range fabrics {
		if f.name == name {
			return f.link, nil
		}
	}
	return nil, fmt.Errorf("unknown fabric %q: profiles are %s", name, strings.Join(FabricNames(), ", "))
}

// links reads the fabric options and the nccl-tests files into curves: fabric
// profiles first, then each file's curve over them for the collective and scope
// it measured.
func (o Options) links() (Links, error) {
	var l Links
	if o.IntraNodeFabric != "" {
		f, err := Fabric(o.IntraNodeFabric)
		if err != nil {
			return l, err
		}
		l.Intra = cloneLink(f)
	}
	if o.InterNodeFabric != "" {
		f, err := Fabric(o.InterNodeFabric)
		if err != nil {
			return l, err
		}
		l.Inter = cloneLink(f)
	}
	for _, path := range o.NCCLTests {
		r, err := ReadNCCLTests(path)
		if err != nil {
			return l, fmt.Errorf("backend_options.nccl_tests: %w", err)
		}
		dst := &l.Intra
		if r.Nodes > 1 {
			dst = &l.Inter
		}
		if *dst == nil {
			*dst = Link{}
		}
		(*dst)[r.Collective] = r.Curve
	}
	return l, nil
}

// cloneLink copies a link so options never write into the profile table.
func cloneLink(l Link) Link {
	out := make(Link, len(l))
	for k, v := range l {
		out[k] = slices.Clone(v)
	}
	return out
}
