// Package model is the Go trainer's Llama-style decoder, forward and backward
// written by hand on a device.Device: token embedding; per block RMSNorm → q, k, v
// projections → RoPE on q and k → causal grouped-query attention → o projection →
// residual, RMSNorm → SwiGLU MLP (gate, up, down) → residual; final RMSNorm,
// untied output head, cross-entropy. No biases.
//
// The API is shaped for FSDP. The parameters of each wrap unit (Layout: the
// embedding, each block, the head) live in one flat buffer, and a Pass runs one
// micro-batch unit by unit: Forward(u, params, save) for u = 0..layers+1, then
// Backward(u, params, grads) for u = layers+1..0, each call taking the unit's
// gathered flat parameters (and flat gradients), so fsdp all-gathers before a call
// and reduce-scatters after. Activations live on the device in category
// activations and are freed as soon as backward no longer needs them; a unit run
// forward with save = false keeps only its input and recomputes the rest in
// backward (activation checkpointing), with bit-identical gradients.
package model

import (
	"errors"
	"fmt"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
)

// Model is a decoder of one shape on one device. It holds no parameters: those are
// the callers' flat unit buffers. It is safe for concurrent use by several Passes.
type Model struct {
	// Shape is the model's shape, with NormEps and RopeTheta defaulted.
	Shape shapes.Shape
	// Units is Layout(Shape).
	Units []Unit
	// Unfused makes passes run the plain ops (the cpu reference's sequence) even
	// on a device.FusedOps device: the baseline the fused sequence's launch count
	// is measured against, and a way around a fused kernel. Set it before NewPass.
	Unfused bool
	dev     device.Device
}

// New returns the model of shape s on dev, or an error when the trainer does not
// implement s (see Layout). A zero NormEps defaults to 1e-5, a zero RopeTheta to 10000.
func New(dev device.Device, s shapes.Shape) (*Model, error) {
	if dev == nil {
		return nil, errors.New("model: no device")
	}
	units, err := Layout(s)
	if err != nil {
		return nil, err
	}
	if s.NormEps == 0 {
		s.NormEps = defaultNormEps
	}
	if s.RopeTheta == 0 {
		s.RopeTheta = defaultRopeTheta
	}
	return &Model{Shape: s, Units: units, dev: dev}, nil
}

// Device is the device the model runs on.
func (m *Model) Device() device.Device { return m.dev }

// AllocUnits allocates one zeroed flat buffer per unit, of exactly the unit's size,
// in category cat; on error it frees what it allocated. (FSDP allocates its own
// sharded and padded buffers; this is for whole-model use on one device.)
func (m *Model) AllocUnits(cat device.Category) ([]device.Buffer, error) {
	bufs := make([]device.Buffer, 0, len(m.Units))
	for _, u := range m.Units {
		b, err := m.dev.Alloc(u.Size, cat)
		if err != nil {
			m.FreeUnits(bufs)
			return nil, fmt.Errorf("model: allocate unit %s: %w", u.Name, err)
		}
		bufs = append(bufs, b)
	}
	return bufs, nil
}

// FreeUnits frees buffers from AllocUnits.
func (m *Model) FreeUnits(bufs []device.Buffer) {
	for _, b := range bufs {
		m.dev.Free(b)
	}
}

// InitUnits writes every unit's initial parameters (Unit.Init) into params, one
// flat buffer per unit of at least the unit's size.
func (m *Model) InitUnits(seed uint64, params []device.Buffer) error {
	if len(params) != len(m.Units) {
		return fmt.Errorf("model: init of %d unit buffers, want %d", len(params), len(m.Units))
	}
	for i, u := range m.Units {
		host := make([]float32, params[i].Len())
		if err := u.Init(seed, 0, host); err != nil {
			return err
		}
		m.dev.CopyFromHost(params[i], host)
	}
	return nil
}

// ForwardBackward runs one micro-batch of the whole model on the model's device,
// one Pass over every unit, and returns the mean loss over its tokens. With grads
// nil it only runs forward; otherwise the gradients of the mean loss are added
// into grads (zero them first for a fresh step). checkpoint recomputes every
// block's activations in backward. It is the single-process reference the
// sharded trainer is checked against.
func (m *Model) ForwardBackward(params, grads []device.Buffer, inputs, targets []int32, seqLen int, checkpoint bool) (loss float64, err error) {
	if len(params) != len(m.Units) || (grads != nil && len(grads) != len(m.Units)) {
		return 0, fmt.Errorf("model: %d parameter and %d gradient buffers, want %d each",
			len(params), len(grads), len(m.Units))
	}
	p, err := m.NewPass(inputs, targets, seqLen)
	if err != nil {
		return 0, err
	}
	defer p.Free()
	for u := range m.Units {
		save := !checkpoint || u == 0 || u == len(m.Units)-1
		if err := p.Forward(u, params[u], save && grads != nil); err != nil {
			return 0, err
		}
	}
	if grads != nil {
		for u := len(m.Units) - 1; u >= 0; u-- {
			if err := p.Backward(u, params[u], grads[u]); err != nil {
				return 0, err
			}
		}
	}
	return p.Loss(), nil
}
