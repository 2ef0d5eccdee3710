//go:build !cgo

package nccl

import (
	"context"
	"errors"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
)

// errNoCgo is why Load fails in a build without cgo: loading libnccl at run time
// needs it.
var errNoCgo = errors.New("nccl: NCCL not loaded: fsdpbench was built without cgo (CGO_ENABLED=0), which loading libnccl needs; rebuild with a C compiler and CGO_ENABLED=1, or set comm: tcp")

// Library is a loaded libnccl; without cgo none is ever loaded.
type Library struct {
	// Path is the file or soname that loaded.
	Path string
}

// VersionString is empty: no Library exists without cgo.
func (*Library) VersionString() string { return "" }

// Load fails in a build without cgo, as it fails where libnccl is missing.
func Load() (*Library, error) { return nil, errNoCgo }

// Communicator is one rank's NCCL communicator; without cgo none is ever made.
// It embeds comm.Communicator for the method set callers hold it as.
type Communicator struct{ comm.Communicator }

// Dial fails in a build without cgo.
func Dial(context.Context, rendezvous.Info, *Library, Options) (*Communicator, error) {
	return nil, errNoCgo
}
