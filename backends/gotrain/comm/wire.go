package comm

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"unsafe"
)

// The wire format. Every frame starts with a fixed header, all little-endian:
//
//	0  magic         uint16 (frameMagic)
//	2  kind          uint8  (Kind)
//	3  version       uint8  (wireVersion)
//	4  payload bytes uint32
//	8  sequence      uint64 (the collective's number on this communicator, from 1)
//	16 total         uint64 (the collective's buffer length in elements)
//	24 frame         uint32 (the frame's index within the collective)
//	28 aux           uint32 (the op of a reduction, the root of a broadcast)
//
// A receiver knows all of these before reading, so any difference (another
// collective, another size, another op or root, a lost frame) is a desynchronised
// peer and fails the collective at once instead of reducing garbage. Payloads are
// float32 little-endian.
const (
	frameMagic  = 0xF5DB
	wireVersion = 1
	headerLen   = 32
	// maxAbortPayload bounds the reason text an abort frame may carry.
	maxAbortPayload = 1 << 16
)

type header struct {
	kind    Kind
	payload uint32
	seq     uint64
	total   uint64
	frame   uint32
	aux     uint32
}

func (h header) put(b []byte) {
	_ = b[headerLen-1]
	binary.LittleEndian.PutUint16(b[0:], frameMagic)
	b[2] = byte(h.kind)
	b[3] = wireVersion
	binary.LittleEndian.PutUint32(b[4:], h.payload)
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint64(b[16:], h.total)
	binary.LittleEndian.PutUint32(b[24:], h.frame)
	binary.LittleEndian.PutUint32(b[28:], h.aux)
}

func parseHeader(b []byte) (header, error) {
	_ = b[headerLen-1]
	if m := binary.LittleEndian.Uint16(b[0:]); m != frameMagic {
		return header{}, fmt.Errorf("bytes %x are not a comm frame header (another program on the connection, or a peer that broke off mid-frame)", b[:8])
	}
	if v := b[3]; v != wireVersion {
		return header{}, fmt.Errorf("wire version %d, this build speaks %d (mixed fsdpbench builds in one job)", v, wireVersion)
	}
	return header{
		kind:    Kind(b[2]),
		payload: binary.LittleEndian.Uint32(b[4:]),
		seq:     binary.LittleEndian.Uint64(b[8:]),
		total:   binary.LittleEndian.Uint64(b[16:]),
		frame:   binary.LittleEndian.Uint32(b[24:]),
		aux:     binary.LittleEndian.Uint32(b[28:]),
	}, nil
}

// String describes a header in desynchronisation errors.
func (h header) String() string {
	return fmt.Sprintf("%s #%d (%d elements, frame %d, %d payload bytes, aux %d)", h.kind, h.seq, h.total, h.frame, h.payload, h.aux)
}

// nativeLittleEndian selects the zero-copy path: on little-endian machines (amd64,
// arm64, ...) a []float32 already is its wire encoding, so payloads are written from
// and read into the caller's slices through an unsafe byte view, with no copy and no
// per-element work. Big-endian machines encode through a reused staging buffer with
// math.Float32bits, which the tests exercise on every machine.
var nativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// floatBytes views f's memory as bytes (4 per element, native order).
func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

// encodeFloats writes src little-endian into dst (len 4×len(src)).
func encodeFloats(dst []byte, src []float32) {
	dst = dst[:4*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

// decodeFloats reads little-endian float32s from src into dst (len(src) = 4×len(dst)).
func decodeFloats(dst []float32, src []byte) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// codec moves float32 payloads between slices and a stream, zero-copy when the
// machine is little-endian. Each goroutine (sender, receiver) owns one, since the
// portable path stages through its buffer.
type codec struct {
	portable bool
	stage    []byte
}

// write writes f's wire encoding to w.
func (c *codec) write(w io.Writer, f []float32) error {
	if !c.portable {
		_, err := w.Write(floatBytes(f))
		return err
	}
	for len(f) > 0 {
		n := min(len(f), len(c.stage)/4)
		encodeFloats(c.stage, f[:n])
		if _, err := w.Write(c.stage[:4*n]); err != nil {
			return err
		}
		f = f[n:]
	}
	return nil
}

// read fills f from r.
func (c *codec) read(r io.Reader, f []float32) error {
	if !c.portable {
		_, err := io.ReadFull(r, floatBytes(f))
		return err
	}
	for len(f) > 0 {
		n := min(len(f), len(c.stage)/4)
		if _, err := io.ReadFull(r, c.stage[:4*n]); err != nil {
			return err
		}
		decodeFloats(f[:n], c.stage)
		f = f[n:]
	}
	return nil
}

// newCodec returns a codec for this machine; portable forces the encoding path.
func newCodec(portable bool, stageBytes int) *codec {
	c := &codec{portable: portable || !nativeLittleEndian}
	if c.portable {
		c.stage = make([]byte, max(stageBytes/4*4, 4))
	}
	return c
}

// abortPayload is the body of an abort frame: who failed, who noticed, and why.
func abortPayload(groupRank, reporter int, reason string) []byte {
	if len(reason) > maxAbortPayload-8 {
		reason = reason[:maxAbortPayload-8]
	}
	b := make([]byte, 8+len(reason))
	binary.LittleEndian.PutUint32(b[0:], uint32(groupRank))
	binary.LittleEndian.PutUint32(b[4:], uint32(reporter))
	copy(b[8:], reason)
	return b
}

func parseAbort(b []byte) (groupRank, reporter int, reason string, err error) {
	if len(b) < 8 {
		return 0, 0, "", fmt.Errorf("abort frame of %d bytes, want at least 8", len(b))
	}
	return int(binary.LittleEndian.Uint32(b[0:])), int(binary.LittleEndian.Uint32(b[4:])), string(b[8:]), nil
}
