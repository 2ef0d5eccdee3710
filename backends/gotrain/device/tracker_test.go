package device

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTrackerPeakOfTotal(t *testing.T) {
	tr := NewTracker(0)
	require.NoError(t, tr.Reserve(100, Params))
	require.NoError(t, tr.Reserve(300, Activations))
	tr.Release(300, Activations)
	require.NoError(t, tr.Reserve(200, Grads))

	s := tr.Stats()
	assert.Equal(t, [NumCategories]int64{Params: 100, Grads: 200}, s.Current)
	assert.Equal(t, [NumCategories]int64{Params: 100, Grads: 200, Activations: 300}, s.Peak)
	assert.Equal(t, int64(300), s.Total)
	// The total never held 600 (the sum of the category peaks) at once.
	assert.Equal(t, int64(400), s.PeakTotal)
	// What was live together at that moment: not the grads that came later.
	assert.Equal(t, [NumCategories]int64{Params: 100, Activations: 300}, s.AtPeak)

	tr.ResetPeak()
	s = tr.Stats()
	assert.Equal(t, s.Current, s.Peak)
	assert.Equal(t, s.Current, s.AtPeak)
	assert.Equal(t, int64(300), s.PeakTotal)
}

func TestTrackerLimit(t *testing.T) {
	tr := NewTracker(1000)
	require.NoError(t, tr.Reserve(600, Params))
	require.NoError(t, tr.Reserve(400, Optimizer), "exactly at the limit fits")
	err := tr.Reserve(1, Activations)
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Contains(t, err.Error(), "params 600, optimizer 400")
	s := tr.Stats()
	assert.Equal(t, int64(1000), s.Total, "a refused allocation charges nothing")
	assert.Equal(t, int64(0), s.Peak[Activations])
	tr.Release(400, Optimizer)
	require.NoError(t, tr.Reserve(1, Activations))
}

func TestTrackerRefusesBadInput(t *testing.T) {
	tr := NewTracker(0)
	require.Error(t, tr.Reserve(1, Category(99)))
	require.Error(t, tr.Reserve(-1, Params))
	assert.Panics(t, func() { tr.Release(1, Params) }, "releasing more than held")
}

func TestCategoryString(t *testing.T) {
	names := make([]string, 0, NumCategories)
	for c := range NumCategories {
		names = append(names, c.String())
	}
	assert.Equal(t, []string{"params", "grads", "optimizer", "activations", "comm", "other"}, names)
	assert.Equal(t, "category(7)", Category(7).String())
}
