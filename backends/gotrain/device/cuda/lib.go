//go:build cgo

package cuda

// #cgo CFLAGS: -O2 -Wall -Werror
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/dynload"
)

// libraries is what the process bound: the driver and cuBLAS, once per process
// (the shim's pointer table is global, and a driver library is never unloaded).
type libraries struct {
	cuda, cublas *dynload.Library
	// driverVersion is cuDriverGetVersion's CUDA version (12020 for 12.2).
	driverVersion int
	// devices is cuDeviceGetCount after cuInit.
	devices int
}

var bind = sync.OnceValues(bindLibraries)

// bindLibraries opens libcuda and libcublas through dynload's search lists
// (FSDPBENCH_LIBCUDA / FSDPBENCH_LIBCUBLAS, the loader's path, the Python
// environment's site-packages/nvidia/*/lib), fills the shim's pointer table and
// initializes the driver. Every failure wraps ErrNoDevice and says what to do.
func bindLibraries() (*libraries, error) {
	l := &libraries{}
	var err error
	if l.cuda, err = dynload.Open(dynload.CUDA); err != nil {
		return nil, fmt.Errorf("%w: the NVIDIA driver library: %w", ErrNoDevice, err)
	}
	if err := fill(C.FSDP_LIB_CUDA, l.cuda); err != nil {
		return nil, fmt.Errorf("%w: %s is not a usable driver library: %w", ErrNoDevice, l.cuda.Path, err)
	}
	if r := int(C.fsdp_cuInit()); r != 0 {
		why := ""
		switch r {
		case cudaErrorNoDevice:
			why = " (the driver is installed but sees no GPU)"
		case cudaErrorStubLibrary:
			why = " (that is the toolkit's stub library, not the driver's: point FSDPBENCH_LIBCUDA at the real libcuda.so.1)"
		}
		return nil, fmt.Errorf("%w: %s from %s%s", ErrNoDevice, cuErr("cuInit", r), l.cuda.Path, why)
	}
	var v, n C.int
	if r := int(C.fsdp_driver_version(&v)); r != 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoDevice, cuErr("cuDriverGetVersion", r))
	}
	if r := int(C.fsdp_device_count(&n)); r != 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoDevice, cuErr("cuDeviceGetCount", r))
	}
	l.driverVersion, l.devices = int(v), int(n)
	if l.devices == 0 {
		return nil, fmt.Errorf("%w: the driver (%s) lists no GPU", ErrNoDevice, l.cuda.Path)
	}
	if l.cublas, err = openCublas(); err != nil {
		return nil, fmt.Errorf("%w: cuBLAS: %w", ErrNoDevice, err)
	}
	if err := fill(C.FSDP_LIB_CUBLAS, l.cublas); err != nil {
		return nil, fmt.Errorf("%w: %s is not a usable cuBLAS: %w", ErrNoDevice, l.cublas.Path, err)
	}
	return l, nil
}

// fill resolves every symbol of one of the shim's tables in lib.
func fill(lib C.int, from *dynload.Library) error {
	var missing []string
	for i := range int(C.fsdp_nsyms(lib)) {
		name := C.GoString(C.fsdp_sym_name(lib, C.int(i)))
		p, err := from.Symbol(name)
		if err != nil {
			missing = append(missing, name)
			continue
		}
		C.fsdp_sym_set(lib, C.int(i), p)
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// openCublas opens cuBLAS through dynload's search list. When a copy was found
// but could not load its companion libcublasLt (a pip wheel's library without a
// RUNPATH), it loads libcublasLt from the same directory and tries again: the
// loader satisfies a dependency by soname from the libraries already loaded.
func openCublas() (*dynload.Library, error) {
	l, err := dynload.Open(dynload.CUBLAS)
	var nf *dynload.NotFoundError
	if err == nil || !errors.As(err, &nf) {
		return l, err
	}
	for _, a := range nf.Tried {
		if !filepath.IsAbs(a.Path) || !strings.Contains(a.Err, "libcublasLt") {
			continue
		}
		lt := filepath.Join(filepath.Dir(a.Path), strings.Replace(filepath.Base(a.Path), "libcublas.", "libcublasLt.", 1))
		if _, serr := os.Stat(lt); serr != nil {
			continue
		}
		if _, lerr := dynload.OpenPath(lt); lerr != nil { // kept loaded for the process, as libcublas is
			continue
		}
		if l, lerr := dynload.OpenPath(a.Path); lerr == nil {
			return l, nil
		}
	}
	return nil, err
}

// Probe reports whether this machine can run the cuda device, and if not, why:
// the error wraps ErrNoDevice and reads "no CUDA device: …". It loads the
// libraries and initializes the driver once per process; no context is created.
func Probe() error {
	_, err := bind()
	return err
}

// DeviceCount is the number of GPUs the driver lists, or the reason there are none.
func DeviceCount() (int, error) {
	l, err := bind()
	if err != nil {
		return 0, err
	}
	return l.devices, nil
}
