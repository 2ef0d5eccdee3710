package comm

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := header{kind: KindReduceScatter, payload: 1 << 20, seq: 1<<40 + 7, total: 1<<33 + 5, frame: 12345, aux: uint32(Average)}
	var b [headerLen]byte
	h.put(b[:])
	got, err := parseHeader(b[:])
	require.NoError(t, err)
	assert.Equal(t, h, got)
	assert.Contains(t, got.String(), "reduce_scatter #1099511627783")

	bad := b
	bad[0] ^= 0xff
	_, err = parseHeader(bad[:])
	assert.ErrorContains(t, err, "not a comm frame header")
	bad = b
	bad[3] = wireVersion + 1
	_, err = parseHeader(bad[:])
	assert.ErrorContains(t, err, "mixed fsdpbench builds")
}

func TestAbortPayload(t *testing.T) {
	origin, reporter, reason, err := parseAbort(abortPayload(3, 17, "it died"))
	require.NoError(t, err)
	assert.Equal(t, []any{3, 17, "it died"}, []any{origin, reporter, reason})
	_, _, _, err = parseAbort([]byte{1, 2})
	assert.Error(t, err)
	long := string(bytes.Repeat([]byte("x"), 2*maxAbortPayload))
	assert.LessOrEqual(t, len(abortPayload(0, 0, long)), maxAbortPayload)
}

// The portable encoding (big-endian machines) must put the same bytes on the wire as
// the zero-copy view, special values included.
func TestFloatEncoding(t *testing.T) {
	in := []float32{0, float32(math.Copysign(0, -1)), 1, -2.5, math.MaxFloat32, math.SmallestNonzeroFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00001)}
	enc := make([]byte, 4*len(in))
	encodeFloats(enc, in)
	if nativeLittleEndian {
		assert.Equal(t, floatBytes(in), enc)
	}
	out := make([]float32, len(in))
	decodeFloats(out, enc)
	for i := range in {
		assert.Equal(t, math.Float32bits(in[i]), math.Float32bits(out[i]), "element %d", i)
	}

	// The codecs, through a stream, with a staging buffer smaller than the data.
	for _, portable := range []bool{false, true} {
		var wire bytes.Buffer
		require.NoError(t, newCodec(portable, 8).write(&wire, in))
		assert.Equal(t, enc, wire.Bytes(), "portable=%v", portable)
		back := make([]float32, len(in))
		require.NoError(t, newCodec(portable, 8).read(&wire, back))
		assert.Equal(t, floatBytes(in), floatBytes(back), "portable=%v", portable)
	}
}

func FuzzParseHeader(f *testing.F) {
	var b [headerLen]byte
	header{kind: KindAllGather, payload: 8, seq: 1, total: 4, frame: 0}.put(b[:])
	f.Add(b[:])
	f.Add(make([]byte, headerLen))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < headerLen {
			return
		}
		h, err := parseHeader(data)
		if err != nil {
			return
		}
		var again [headerLen]byte
		h.put(again[:])
		if !bytes.Equal(again[:], data[:headerLen]) {
			t.Fatalf("header %v does not round-trip: %x vs %x", h, again, data[:headerLen])
		}
		_, _, _, _ = parseAbort(data)
	})
}
