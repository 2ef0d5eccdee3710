// Package hardware holds hardware profiles: the peak FLOP/s, memory and link
// bandwidths of the devices fsdpbench predicts for (the analytic model) and reports
// MFU against, and detection of the local hardware for `hardware: auto`.
package hardware

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Auto is the hardware value that asks for detection (see Detect).
const Auto = "auto"

// Profile is what the analytic model and MFU need to know about one device and the
// links between devices. Figures are per device (per GPU, or the whole host for cpu).
type Profile struct {
	Name string `json:"name"`
	// PeakFLOPS is the dense (no sparsity) peak per precision: "bf16", "fp16",
	// "fp32", and "tf32" where tensor cores run it.
	PeakFLOPS map[string]float64 `json:"peak_flops"`
	// MemBytes is the device memory as nvidia-smi's memory.total reports it (for cpu:
	// this host's RAM).
	MemBytes       int64   `json:"mem_bytes"`
	MemBWBytesPerS float64 `json:"mem_bw_bytes_per_s"`
	// IntraNodeBusBWBytesPerS and InterNodeBusBWBytesPerS are collective bus
	// bandwidths per device, in the nccl-tests sense (busbw = algbw × 2(n−1)/n for
	// all-reduce, × (n−1)/n for all-gather and reduce-scatter), so one figure serves
	// every collective and world size.
	IntraNodeBusBWBytesPerS float64 `json:"intra_node_bus_bw_bytes_per_s"`
	InterNodeBusBWBytesPerS float64 `json:"inter_node_bus_bw_bytes_per_s"`
	// HostLinkBWBytesPerS is the device↔host copy bandwidth (PCIe), used for CPU
	// offload; 0 for cpu.
	HostLinkBWBytesPerS float64 `json:"host_link_bw_bytes_per_s,omitempty"`
	// GPUsPerNode is how many devices a typical node of this kind holds; 0 for cpu,
	// where ranks are processes sharing the host.
	GPUsPerNode int `json:"gpus_per_node"`
	// Efficiency is the fraction of PeakFLOPS that the compute of a well-tuned
	// training step reaches (communication is modelled separately).
	Efficiency float64 `json:"efficiency"`
	// AttentionEfficiency is the fraction of PeakFLOPS fused (flash) attention
	// reaches, counted in model FLOPs (the 12·L·H·Q·T term of
	// shapes.Shape.FlopsPerToken); 0: Efficiency. Attention kernels run at a
	// rate of their own, below a GEMM's, so its share of a step's FLOPs (which
	// grows with the sequence) moves the step's efficiency.
	AttentionEfficiency float64 `json:"attention_efficiency,omitempty"`
	// AttentionHalfSeq is the sequence length at which fused attention runs
	// at half of AttentionEfficiency: its rate at sequence s is
	// AttentionEfficiency × s/(s + AttentionHalfSeq); 0: the same rate at every
	// length.
	AttentionHalfSeq float64 `json:"attention_half_seq,omitempty"`
	IsGPU            bool    `json:"is_gpu"`
	// File is the profile file a user-defined profile was read from (LoadFile);
	// empty for the built-in ones.
	File string `json:"file,omitempty"`
	// InterNodeDefault says InterNodeBusBWBytesPerS is the default for a
	// cluster nothing is known about (DefaultInterNodeBusBW), not a figure
	// given for this hardware: predictions across nodes say so.
	InterNodeDefault bool `json:"inter_node_default,omitempty"`
}

// Peak returns the dense peak FLOP/s at a precision ("bf16", "fp16", "fp32"),
// or an error naming the precisions the profile knows.
func (p Profile) Peak(precision string) (float64, error) {
	if v, ok := p.PeakFLOPS[precision]; ok {
		return v, nil
	}
	known := make([]string, 0, len(p.PeakFLOPS))
	for k := range p.PeakFLOPS {
		known = append(known, k)
	}
	sort.Strings(known)
	return 0, fmt.Errorf("hardware %s has no peak FLOP/s for precision %q (known: %s)", p.Name, precision, strings.Join(known, ", "))
}

const (
	tera = 1e12
	giga = 1e9
	mib  = 1 << 20
)

// gpuEfficiency is the default fraction of dense peak the matmuls of a
// training step reach on the GPUs below (the sim adds attention at
// gpuAttentionEfficiency and the elementwise kernels at the memory bandwidth
// on its own). The ceiling is a large GEMM: 8192³ bf16 reaches ≈ 800 of 989
// TFLOP/s (0.81) on the H100 lent to this project (FACTS.md). Whole training
// steps publish lower model-FLOPs utilization, because attention, the
// elementwise kernels, recompute and exposed communication add to the
// matmuls: fms-fsdp 0.46 (Llama 2 7B, H100), llm.c ≈ 0.50 (GPT-2 1.5B, 8 ×
// H100), torchtitan 0.34 eager (Llama 3.1 8B, seq 8192, 8 × H100). 0.55 is
// chosen with those terms (attention's rate rising with the sequence,
// attentionHalfSeq; recompute at gpuRecomputeShare) on the rows the sim was
// tuned to: llm-foundry's kept H100 rows alone prefer 0.65 (mean error 4.2%
// against 9.3% at 0.55), but PyTorch-native stacks on H100 run below
// llm-foundry's (fms-fsdp's own text puts its H100 MFU at 0.37; torchtitan's
// rows, TestPublishedTorchtitanRows), and at 0.65 those are 12–59% fast;
// 0.55 keeps every stack within the bounds. The held-out rows
// (published_heldout_test.go, published_foundrycsv_test.go,
// published_external_test.go) then checked it. Measured runs calibrate it.
const gpuEfficiency = 0.55

// gpuAttentionEfficiency is the H100's flash attention rate at long
// sequences, as a fraction of peak in model FLOPs (PaLM's 12·L·H·Q·T per
// token, which counts the causal mask's skipped half and not backward's
// recompute: FlashAttention's own count for causal forward and backward is
// 7/12 of it); at sequence s it runs at s/(s + attentionHalfSeq) of it. Read
// off the kept H100 rows with gpuEfficiency (so 0.15 at seq 2048):
// FlashAttention-2 reaches ≈ 335 TFLOP/s causal forward at 16K on H100
// (FlashAttention-3 paper, Shah et al. 2024, Fig. 5), ≈ 0.58 of peak in
// this count; the tables' Triton kernels and backward are slower.
const gpuAttentionEfficiency = 0.30

// attentionHalfSeq is the sequence length at which the profiles' flash
// attention runs at half its long-sequence rate. FlashAttention's cost per
// query block has a part that does not grow with the keys it visits (loading
// the block, the softmax's final rescale, writing the output; in backward the
// dQ accumulation), so its rate rises with the sequence and levels off
// (FlashAttention-2 paper, Dao 2023, Figs. 4–6: forward and backward TFLOP/s
// rise from seq 512 to 16K on A100 and H100). 2048 is the value the kept
// rows of both GPUs agree on (H100 1536–3072, A100 1024–3072 within 0.5
// points of their best mean error). With one rate at every length the sim
// under-predicted A100 rows at seq 16K–64K by 17% and over-predicted small
// models at seq 512 by up to 34%.
const attentionHalfSeq = 2048

// a100Efficiency is the A100 profiles' default for matmuls: A100s reach a
// larger fraction of their (lower) peak than H100s, whose tensor cores outrun
// the memory and the non-GEMM kernels around them. MosaicML's llm-foundry
// benchmark tables (scripts/train/benchmarking/README.md, "A100 80GB with 1600
// Gbps node-node interconnect (RoCE)" and "A100 40GB ...", MPT 760m–70b under
// FSDP, bf16, flash attention) publish MFU 0.55–0.64 for the runs without
// activation checkpointing at seq 2048–8192 and HFU 0.69–0.79 for the
// checkpointed ones, against 0.35–0.46 on H100. 0.73 (with
// a100AttentionEfficiency, attentionHalfSeq and gpuRecomputeShare) gives the
// 70 A100 rows the sim keeps mean errors of 7.9% (80 GB, one node), 3.5% (40
// GB, one node) and 4.0% (40 GB, across nodes). It was 0.70 until the sim
// timed the matmuls' weight traffic and FSDP's copies apart (sim's
// weightTraffic, fsdpCopyTraffic), time the efficiency had absorbed; at 0.70
// the kept rows' means became 10.1%, 4.7% and 6.2%. 0.76 fits them a little
// better on average (6.0%, 3.5%, 3.6%) but puts the network-bound 70B row on
// 64 GPUs at +33% and an 80 GB row at +30%. (The held-out rows were seen at
// 0.70 and 0.73 both: torchtitan's A100 rows are under-predicted at either.)
const a100Efficiency = 0.73

// a100AttentionEfficiency is the A100's flash attention rate at long
// sequences in model FLOPs (see gpuAttentionEfficiency), read off the kept
// A100 rows likewise: ≈ 100 TFLOP/s in FlashAttention's count, between what
// FlashAttention (v1) and FlashAttention-2 reach forward and backward on A100
// at 16K (FlashAttention-2 paper, Fig. 4); llm-foundry's A100 tables ran its
// Triton kernel.
const a100AttentionEfficiency = 0.55

// Inter-node default: 25 GB/s, one 200 Gb/s InfiniBand HDR (or RoCE) NIC's line
// rate, for a cluster nothing is known about. It is not what rail-optimized
// clusters measure: there NCCL runs a ring per rail and nccl-tests' busbw across
// nodes reaches hundreds of GB/s (400–450 on 8 × 400G), so the sim's
// inter_node_fabric, nccl_tests or inter_node_bus_bw_gbps (a measured busbw)
// should replace it; plain TCP clusters (the seed's two-node run) get a few GB/s.
const defaultInterNodeBusBW = 25 * giga

// DefaultInterNodeBusBW is defaultInterNodeBusBW, for notes that explain it.
const DefaultInterNodeBusBW = defaultInterNodeBusBW

// gpuProfiles are the GPU profiles. Peaks are NVIDIA's datasheet dense figures
// (the datasheets print tensor-core figures with 2:4 sparsity; dense is half). "fp32"
// is the non-tensor-core FP32 figure, because PyTorch runs fp32 matmuls without TF32
// unless torch.backends.cuda.matmul.allow_tf32 (off by default since 1.12) or
// set_float32_matmul_precision("high") says otherwise; "tf32" is the tensor-core
// dense figure for runs that enable it. Memory is nvidia-smi's memory.total for the
// part. Intra-node figures are nccl-tests busbw at large messages where it is
// published (A100: 230 GB/s of NVLink 3's 300 a direction, as the nvlink3-8gpu
// fabric; with 300, llm-foundry's communication-bound A100 rows were predicted
// up to twice as fast), else the link's per-direction bandwidth (NVLink 4's
// "900 GB/s" counts both directions; H100 nodes measure 460 of its 450);
// calibration replaces them with what a cluster measures.
var gpuProfiles = []Profile{
	{
		Name: "h100-sxm",
		// H100 SXM5: BF16/FP16 1,979 sparse → 989.5 dense; TF32 989 → 494.5; FP32 67.
		PeakFLOPS:               map[string]float64{"bf16": 989.5 * tera, "fp16": 989.5 * tera, "tf32": 494.5 * tera, "fp32": 67 * tera},
		MemBytes:                81559 * mib, // "NVIDIA H100 80GB HBM3"
		MemBWBytesPerS:          3.35e12,
		IntraNodeBusBWBytesPerS: 450 * giga, // NVLink 4: 900 GB/s bidirectional per GPU
		InterNodeBusBWBytesPerS: defaultInterNodeBusBW,
		InterNodeDefault:        true,
		HostLinkBWBytesPerS:     64 * giga, // PCIe Gen5 x16, per direction
		GPUsPerNode:             8,
		Efficiency:              gpuEfficiency,
		AttentionEfficiency:     gpuAttentionEfficiency,
		AttentionHalfSeq:        attentionHalfSeq,
		IsGPU:                   true,
	},
	{
		Name: "h100-pcie",
		// H100 PCIe: BF16/FP16 1,513 sparse → 756 dense; TF32 756 → 378; FP32 51.
		PeakFLOPS:      map[string]float64{"bf16": 756 * tera, "fp16": 756 * tera, "tf32": 378 * tera, "fp32": 51 * tera},
		MemBytes:       81559 * mib,
		MemBWBytesPerS: 2.0e12,
		// Peer traffic crosses PCIe Gen5 x16 (64 GB/s per direction); the optional
		// NVLink bridge pairs only two cards, so collectives over 8 see PCIe.
		IntraNodeBusBWBytesPerS: 64 * giga,
		InterNodeBusBWBytesPerS: defaultInterNodeBusBW,
		InterNodeDefault:        true,
		HostLinkBWBytesPerS:     64 * giga,
		GPUsPerNode:             8,
		Efficiency:              gpuEfficiency,
		AttentionEfficiency:     gpuAttentionEfficiency,
		AttentionHalfSeq:        attentionHalfSeq,
		IsGPU:                   true,
	},
	{
		Name: "h200",
		// H200 SXM: the H100 SXM's compute (BF16 1,979 sparse → 989.5 dense) with
		// 141 GB of HBM3e at 4.8 TB/s.
		PeakFLOPS:               map[string]float64{"bf16": 989.5 * tera, "fp16": 989.5 * tera, "tf32": 494.5 * tera, "fp32": 67 * tera},
		MemBytes:                143771 * mib, // "NVIDIA H200"
		MemBWBytesPerS:          4.8e12,
		IntraNodeBusBWBytesPerS: 450 * giga, // NVLink 4
		InterNodeBusBWBytesPerS: defaultInterNodeBusBW,
		InterNodeDefault:        true,
		HostLinkBWBytesPerS:     64 * giga,
		GPUsPerNode:             8,
		Efficiency:              gpuEfficiency,
		AttentionEfficiency:     gpuAttentionEfficiency,
		AttentionHalfSeq:        attentionHalfSeq,
		IsGPU:                   true,
	},
	{
		Name: "a100-40g",
		// A100 40GB SXM: the A100 80GB's compute with 40 GB of HBM2 at 1,555 GB/s.
		PeakFLOPS:               map[string]float64{"bf16": 312 * tera, "fp16": 312 * tera, "tf32": 156 * tera, "fp32": 19.5 * tera},
		MemBytes:                40960 * mib, // "NVIDIA A100-SXM4-40GB"
		MemBWBytesPerS:          1.555e12,
		IntraNodeBusBWBytesPerS: 230 * giga, // NVLink 3 (300 GB/s a direction): nccl-tests busbw, as nvlink3-8gpu
		InterNodeBusBWBytesPerS: defaultInterNodeBusBW,
		InterNodeDefault:        true,
		HostLinkBWBytesPerS:     32 * giga, // PCIe Gen4 x16, per direction
		GPUsPerNode:             8,
		Efficiency:              a100Efficiency,
		AttentionEfficiency:     a100AttentionEfficiency,
		AttentionHalfSeq:        attentionHalfSeq,
		IsGPU:                   true,
	},
	{
		Name: "a100-80g",
		// A100 80GB SXM: BF16/FP16 312 dense; TF32 156 dense; FP32 19.5.
		PeakFLOPS:               map[string]float64{"bf16": 312 * tera, "fp16": 312 * tera, "tf32": 156 * tera, "fp32": 19.5 * tera},
		MemBytes:                81920 * mib, // "NVIDIA A100-SXM4-80GB"
		MemBWBytesPerS:          2.039e12,
		IntraNodeBusBWBytesPerS: 230 * giga, // NVLink 3 (300 GB/s a direction): nccl-tests busbw, as nvlink3-8gpu
		InterNodeBusBWBytesPerS: defaultInterNodeBusBW,
		InterNodeDefault:        true,
		HostLinkBWBytesPerS:     32 * giga, // PCIe Gen4 x16, per direction
		GPUsPerNode:             8,
		Efficiency:              a100Efficiency,
		AttentionEfficiency:     a100AttentionEfficiency,
		AttentionHalfSeq:        attentionHalfSeq,
		IsGPU:                   true,
	},
}

// CPU figures are nominal until the calibration issue measures them.
const (
	// cpuPeakPerCore: a 256-bit (AVX2) core with two FMA pipes retires 2 × 8 fp32
	// lanes × 2 FLOPs = 32 FLOPs per cycle; at a nominal 2.5 GHz that is 80 GFLOP/s.
	// Go has no bf16/fp16 arithmetic, so every precision computes at the fp32 rate.
	cpuPeakPerCore = 80 * giga
	// cpuEfficiency: OpenBLAS reaches ≈ 100 GFLOP/s on a matmul on this project's
	// 2-core CI machine (FACTS.md), ≈ 0.6 of the nominal peak; a training step with
	// non-GEMM ops and a Go (not BLAS) GEMM gets a fraction of that.
	cpuEfficiency = 0.1
	// cpuMemBW: dual-channel DDR4-3200 (2 × 25.6 GB/s).
	cpuMemBW = 51.2 * giga
	// cpuIntraNodeBusBW: ranks on one host exchange over loopback TCP, a memory copy
	// through the kernel: a few GB/s.
	cpuIntraNodeBusBW = 4 * giga
	// cpuInterNodeBusBW: 10 Gb/s Ethernet.
	cpuInterNodeBusBW = 1.25 * giga
)

// cpuProfile describes this host: its RAM (MemTotal of /proc/meminfo) and its cores
// (runtime.NumCPU, which honours the process's CPU affinity).
func cpuProfile() Profile {
	peak := cpuPeakPerCore * float64(runtime.NumCPU())
	mem, _ := hostMem()
	return Profile{
		Name:                    "cpu",
		PeakFLOPS:               map[string]float64{"bf16": peak, "fp16": peak, "fp32": peak},
		MemBytes:                mem,
		MemBWBytesPerS:          cpuMemBW,
		IntraNodeBusBWBytesPerS: cpuIntraNodeBusBW,
		InterNodeBusBWBytesPerS: cpuInterNodeBusBW,
		Efficiency:              cpuEfficiency,
	}
}

// hostMem is hostMemBytes, read once: the sim looks the cpu profile up per run.
var hostMem = sync.OnceValues(hostMemBytes)

// hostMemBytes reads MemTotal from /proc/meminfo; 0 and an error where there is none
// (not Linux), and callers treat 0 as unknown.
func hostMemBytes() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return parseMemInfo(b)
}

// parseMemInfo extracts MemTotal (in kB, as the kernel writes it) from /proc/meminfo.
func parseMemInfo(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: MemTotal %q: %w", f[1], err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/meminfo: no MemTotal line")
}

// Names lists the profile names, sorted.
func Names() []string {
	names := []string{"cpu"}
	for _, p := range gpuProfiles {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the named profile, or the profile a YAML file defines when name
// is a path ending in .yaml or .yml (LoadFile), or an error that lists them and
// suggests the nearest name. "auto" is not a profile: call Detect for it.
func Lookup(name string) (Profile, error) {
	if IsFile(name) {
		return LoadFile(name)
	}
	if name == "cpu" {
		return cpuProfile(), nil
	}
	for _, p := range gpuProfiles {
		if p.Name == name {
			return clone(p), nil
		}
	}
	msg := fmt.Sprintf("unknown hardware %q", name)
	if c := sweeps.Closest(name, Names()); c != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", c)
	}
	return Profile{}, fmt.Errorf("%s: profiles are %s, or auto to detect, or the path of a profile file (.yaml, see examples/hardware/my-gpu.yaml)", msg, strings.Join(Names(), ", "))
}

// Check reports whether name is a profile or "auto".
func Check(name string) error {
	if name == Auto {
		return nil
	}
	_, err := Lookup(name)
	return err
}

// clone copies p so callers may change its map without touching the table.
func clone(p Profile) Profile {
	m := make(map[string]float64, len(p.PeakFLOPS))
	for k, v := range p.PeakFLOPS {
		m[k] = v
	}
	p.PeakFLOPS = m
	return p
}
