//go:build cgo

package cuda

// #include "shim.h"
// #include <stdlib.h>
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
)

// kernelSet is the loaded fatbin and the function of every kernel in kernels.All.
type kernelSet struct {
	mod C.CUmodule
	fns map[*kernels.Kernel]C.CUfunction
}

// loadKernels loads the embedded fatbin into the device's context (the driver
// picks the cubin for the GPU, or JIT-compiles the PTX) and looks every kernel up,
// so a fatbin without code for this GPU fails at New rather than at the first op.
func loadKernels(d *Device) (*kernelSet, error) {
	img := kernels.Fatbin
	if len(img) == 0 {
		return nil, fmt.Errorf("the kernels' fatbin is empty: regenerate it with go generate ./backends/gotrain/device/cuda/kernels")
	}
	cimg := C.CBytes(img) // the driver reads the image during the call; C memory keeps cgo's rules simple
	defer C.free(cimg)
	ks := &kernelSet{fns: map[*kernels.Kernel]C.CUfunction{}}
	var mod C.CUmodule
	if err := cuErr("cuModuleLoadData", int(C.fsdp_module_load(d.ctx, &mod, cimg))); err != nil {
		return nil, fmt.Errorf("load the kernels (%d-byte fatbin, GPU of compute capability %s): %w", len(img), d.info.ComputeCapability, err)
	}
	ks.mod = mod
	for _, k := range kernels.All {
		name := C.CString(k.Name)
		var f C.CUfunction
		r := int(C.fsdp_module_function(d.ctx, mod, name, &f))
		C.free(unsafe.Pointer(name))
		if r != 0 {
			ks.unload(d)
			return nil, fmt.Errorf("kernel %s: %w", k.Name, cuErr("cuModuleGetFunction", r))
		}
		ks.fns[k] = f
	}
	return ks, nil
}

func (ks *kernelSet) unload(d *Device) {
	if ks.mod != nil {
		C.fsdp_module_unload(d.ctx, ks.mod)
		ks.mod = nil
	}
}

// arg is one kernel argument: its kind and its bits, little-endian in an 8-byte
// slot (a 4-byte parameter reads the low half).
type arg struct {
	kind kernels.Kind
	bits uint64
}

func ptrArg(b *buffer) arg { return arg{kernels.Ptr, b.ptr} }
func addrArg(p uint64) arg { return arg{kernels.Ptr, p} }
func f32Arg(v float32) arg { return arg{kernels.F32, uint64(math.Float32bits(v))} }
func i64Arg(v int) arg     { return arg{kernels.I64, uint64(int64(v))} }
func i32Arg(v int) arg {
	if v < math.MinInt32 || v > math.MaxInt32 {
		panic(fmt.Sprintf("cuda: %d does not fit a kernel's int32 parameter", v))
	}
	return arg{kernels.I32, uint64(uint32(int32(v)))}
}

// grid is a launch's grid; the block is the kernel's.
type grid struct{ x, y, z int }

// launch issues k on the compute stream. The arguments must match k's parameter
// kinds one for one: a mismatch is a programming error of the wrapper and panics
// naming the parameter. d.mu is held.
func (d *Device) launch(k *kernels.Kernel, g grid, shared int, args ...arg) {
	if len(args) != len(k.Params) {
		panic(fmt.Sprintf("cuda: %s takes %d parameters, the wrapper passes %d", k.Name, len(k.Params), len(args)))
	}
	var slots [32]C.ulonglong
	for i, a := range args {
		if a.kind != k.Params[i].Kind {
			panic(fmt.Sprintf("cuda: %s parameter %d (%s) is %v, the wrapper passes %v", k.Name, i, k.Params[i].Name, k.Params[i].Kind, a.kind))
		}
		slots[i] = C.ulonglong(a.bits)
	}
	if d.launchHook != nil {
		d.launchHook(k, args)
	}
	if g.x < 1 || g.y < 1 || g.z < 1 || g.y > 65535 || g.z > 65535 || g.x > math.MaxInt32 {
		panic(fmt.Sprintf("cuda: %s: grid %+v outside CUDA's limits", k.Name, g))
	}
	if d.k == nil { // closed
		d.issue(k.Name, func() int { return 0 })
		return
	}
	f := d.k.fns[k]
	d.countWork()
	d.issue(k.Name, func() int {
		return int(C.fsdp_launch(d.ctx, f, C.uint(g.x), C.uint(g.y), C.uint(g.z), C.uint(k.Block), C.uint(shared),
			d.compute, &slots[0], C.int(len(args))))
	})
}
