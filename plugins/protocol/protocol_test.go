package protocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
)

func TestEventsSurviveTheWire(t *testing.T) {
	loss := 2.5
	now := time.Unix(1700000000, 123456789)
	for _, ev := range []backends.Event{
		{Kind: backends.EventStarted, Time: now},
		{Kind: backends.EventStep, Time: now, Rank: 3, Step: 7, Loss: &loss, StepTimeS: 0.25, Tokens: 4096},
		{Kind: backends.EventStep, Step: 1}, // no loss, no time: both stay unknown
		{Kind: backends.EventLog, Time: now, Stream: "stderr", Line: "warning: x"},
		{Kind: backends.EventFinished, Time: now, Status: results.StatusOOM},
	} {
		got := EventFromPB(EventToPB(ev))
		assert.True(t, got.Time.Equal(ev.Time), "time %v, want %v", got.Time, ev.Time)
		got.Time = ev.Time
		assert.Equal(t, ev, got)
	}
}
