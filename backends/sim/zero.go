package sim

import "github.com/fsdpbench/fsdpbench/sweeps"

// ZeRO stages (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", §5): which model states are partitioned across the N
// data-parallel ranks.
const (
	Stage0 = 0 // plain data parallelism: nothing partitioned (DDP, FSDP NO_SHARD)
	Stage1 = 1 // P_os: optimizer states
	Stage2 = 2 // P_os+g: and gradients (FSDP SHARD_GRAD_OP)
	Stage3 = 3 // P_os+g+p: and parameters (FSDP FULL_SHARD)
)

// BytesPerParam is how many bytes of each model state one parameter costs.
// Optimizer is ZeRO's K: everything the optimizer keeps beyond the training copy of
// the parameters and the gradients.
type BytesPerParam struct {
	Param     int64 `json:"param"`
	Grad      int64 `json:"grad"`
	Optimizer int64 `json:"optimizer"`
}

// Total is the bytes of model state per parameter without any partitioning.
func (b BytesPerParam) Total() int64 { return b.Param + b.Grad + b.Optimizer }

// StateBytes is the per-parameter model state of Adam training at a precision.
// Mixed precision (bf16, fp16) keeps 2-byte parameters and gradients and, in the
// optimizer, an fp32 master copy plus Adam's two fp32 moments: K = 4 + 4 + 4 = 12,
// ZeRO's figure. fp32 trains the fp32 parameters directly, so there is no master
// copy: 4-byte parameters and gradients and K = 8. Both total 16 bytes/parameter.
func StateBytes(precision string) BytesPerParam {
	if precision == sweeps.FP32 {
		return BytesPerParam{Param: 4, Grad: 4, Optimizer: 8}
	}
	return BytesPerParam{Param: 2, Grad: 2, Optimizer: 12}
}

// ModelState is one rank's model-state memory, by state.
type ModelState struct {
	Params    int64 `json:"params"`
	Grads     int64 `json:"grads"`
	Optimizer int64 `json:"optimizer"`
}

// Total is the sum of the states.
func (m ModelState) Total() int64 { return m.Params + m.Grads + m.Optimizer }

// ModelStates is the model-state memory of one of n ranks at a ZeRO stage: the
// partitioned states are split evenly (a flat buffer padded to a multiple of n, as
// FSDP pads its flat parameters), the others are whole on every rank.
func ModelStates(params int64, stage, n int, b BytesPerParam) ModelState {
	n = max(n, 1)
	shard := (params + int64(n) - 1) / int64(n)
	m := ModelState{Params: params * b.Param, Grads: params * b.Grad, Optimizer: params * b.Optimizer}
	if stage >= Stage1 {
		m.Optimizer = shard * b.Optimizer
	}
	if stage >= Stage2 {
		m.Grads = shard * b.Grad
	}
	if stage >= Stage3 {
		m.Params = shard * b.Param
	}
	return m
}

// ModelStateBytes is ModelStates(...).Total(): ZeRO's per-device model-state memory,
// (2 + 2 + K)·Ψ at stage 0, 2Ψ + 2Ψ + K·Ψ/N at stage 1, 2Ψ + (2 + K)·Ψ/N at stage 2
// and (2 + 2 + K)·Ψ/N at stage 3 for mixed precision.
func ModelStateBytes(params int64, stage, n int, b BytesPerParam) int64 {
	return ModelStates(params, stage, n, b).Total()
}
