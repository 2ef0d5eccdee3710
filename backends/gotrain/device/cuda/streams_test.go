//go:build cgo

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// TestFreeAfter: a buffer released with FreeAfter leaves the tracker at once, as
// Free does, but its memory goes back to the arena only when the event has
// completed: with the comm stream running late on a thread of its own, the next
// allocation gets other memory, and the block returns once the stream caught up.
// With streams that run at issue, the event is complete at once and the block is
// reused by the next allocation, as after Free.
func TestFreeAfter(t *testing.T) {
	requireFakes(t)
	for _, tc := range []struct {
		name     string
		env      []string
		reusedAt bool
	}{
		{"streams run at issue", []string{"FAKECUDA_STREAMS", "sync", "FAKECUDA_STREAM_DELAY_US", ""}, true},
		{"comm stream late", []string{"FAKECUDA_STREAMS", "async", "FAKECUDA_STREAM_DELAY_US", "1:300000"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < len(tc.env); i += 2 {
				t.Setenv(tc.env[i], tc.env[i+1]) // read when the device creates its streams
			}
			d := newTestDevice(t, Options{})
			a := upload(t, d, []float32{1, 2, 3, 4})
			ptr, before := Pointer(a), d.Memory().Total
			d.FreeAfter(a, d.Record(device.CommStream))
			assert.Equal(t, before-16, d.Memory().Total, "the tracker is released at once")
			b := alloc(t, d, 4)
			assert.Equal(t, tc.reusedAt, Pointer(b) == ptr, "the next allocation reuses the block only once the event completed")
			assert.Positive(t, d.Extras().Slack, "a pending block is the arena's, reported as slack")
			require.NoError(t, d.Sync())
			c := alloc(t, d, 4)
			if !tc.reusedAt {
				assert.Equal(t, ptr, Pointer(c), "after the comm stream caught up, the block is back in the arena")
			}
			d.Free(b)
			d.Free(c)
			assert.Zero(t, d.Memory().Total)
		})
	}
}

// TestRecordTimed: timing events give the time between them once the streams
// have passed them (the comm stream on a thread of its own, each of its
// operations 20 ms late: its second event completes at least that much after
// its first; one on the compute stream is timed against them too), an untimed
// or released event is refused with an error rather than a figure, and the
// device stays usable.
func TestRecordTimed(t *testing.T) {
	requireFakes(t)
	t.Setenv("FAKECUDA_STREAMS", "async")
	t.Setenv("FAKECUDA_STREAM_DELAY_US", "1:20000")
	d := newTestDevice(t, Options{})
	start := d.RecordTimed(device.CommStream)
	end := d.RecordTimed(device.CommStream)
	compute := d.RecordTimed(device.ComputeStream)
	plain := d.Record(device.ComputeStream)
	require.NoError(t, d.Sync())
	el, err := d.Elapsed(start, end)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, el.Microseconds(), int64(19500), "the comm stream's second event came at least its delay later")
	_, err = d.Elapsed(compute, end)
	require.NoError(t, err, "events of two streams are timed against each other")
	_, err = d.Elapsed(start, plain)
	assert.Error(t, err, "an untimed event has no time")
	for _, e := range []device.Event{start, end, compute, plain} {
		d.Release(e)
	}
	_, err = d.Elapsed(start, end)
	assert.Error(t, err, "a released event has no time")
	require.NoError(t, d.Sync(), "refused readings are not the device's failure")
}
