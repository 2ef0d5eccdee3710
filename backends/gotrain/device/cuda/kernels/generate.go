package kernels

import "embed"

//go:generate ./gen.sh kernels.fatbin

// Fatbin is every kernel compiled by gen.sh: sm_80 and sm_90 cubins and compute_80
// PTX (which the driver JIT-compiles for newer GPUs), for cuModuleLoadData.
//
//go:embed kernels.fatbin
var Fatbin []byte

// Sources are the kernel sources (the .cu files and common.cuh), from which the
// fakecuda package builds the CPU runner's kernel registry.
//
//go:embed *.cu *.cuh
var Sources embed.FS
