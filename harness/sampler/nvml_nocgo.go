//go:build !cgo

package sampler

import (
	"context"
	"errors"
)

// NVML is a Source that reads the devices through the NVIDIA driver's NVML library.
// This build has no cgo, which loading NVML needs, so it never opens.
type NVML struct{}

var errNoCgo = errors.New("this fsdpbench was built without cgo, which NVML needs (build with CGO_ENABLED=1); GPU sampling is off")

// OpenNVML reports that NVML cannot be loaded by a build without cgo.
func OpenNVML() (*NVML, error) { return nil, errNoCgo }

// Close does nothing.
func (*NVML) Close() error { return nil }

// Devices is 0.
func (*NVML) Devices() int { return 0 }

// Info is empty.
func (*NVML) Info(int) DeviceInfo { return DeviceInfo{} }

// Sample fails: there is no device.
func (*NVML) Sample(context.Context, int) (Reading, error) { return Reading{}, errNoCgo }
