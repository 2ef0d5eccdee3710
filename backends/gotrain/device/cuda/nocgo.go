//go:build !cgo

package cuda

import (
	"fmt"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// errNoCgo is why this machine cannot run the cuda device in a build without
// cgo, whatever GPU it has: loading libcuda and cuBLAS at run time needs cgo.
var errNoCgo = fmt.Errorf("%w: fsdpbench was built without cgo (CGO_ENABLED=0), which the cuda device needs to load libcuda and cuBLAS; rebuild with a C compiler and CGO_ENABLED=1", ErrNoDevice)

// Probe fails in a build without cgo, as it fails on a machine without a GPU.
func Probe() error { return errNoCgo }

// DeviceCount fails in a build without cgo.
func DeviceCount() (int, error) { return 0, errNoCgo }

// New fails in a build without cgo.
func New(Options) (*Device, error) { return nil, errNoCgo }

// Device is a GPU; without cgo none is ever opened. It embeds device.Device for
// the method set callers hold it as.
type Device struct{ device.Device }

// Info is empty: no Device exists without cgo.
func (*Device) Info() Info { return Info{} }

// Close does nothing: no Device exists without cgo.
func (*Device) Close() error { return nil }

// CollectiveStream is the device's communication stream as NCCL uses it.
type CollectiveStream struct{}

// CollectiveStream returns the comm stream; without cgo there is none.
func (*Device) CollectiveStream() *CollectiveStream { return &CollectiveStream{} }

// Handle is 0: there is no stream without cgo.
func (*CollectiveStream) Handle() uintptr { return 0 }

// Done fails: there is no stream without cgo.
func (*CollectiveStream) Done() (bool, error) { return false, errNoCgo }

// Scratch fails: there is no device memory without cgo.
func (*Device) Scratch(int) (uintptr, error) { return 0, errNoCgo }

// ToDevice fails: there is no device memory without cgo.
func (*Device) ToDevice(uintptr, []float32) error { return errNoCgo }

// ToHost fails: there is no device memory without cgo.
func (*Device) ToHost([]float32, uintptr) error { return errNoCgo }
