package sweeps

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLargeGridHasNoIDCollision is issue 13 §6: with 32 bits of hash, a
// 300,000-point grid over seed × seq_len (one slug for every point) failed with
// "two different runs get the same ID". With 64 bits it expands.
func TestLargeGridHasNoIDCollision(t *testing.T) {
	if testing.Short() {
		t.Skip("expands 300,000 points")
	}
	seeds := make([]string, 600)
	for i := range seeds {
		seeds[i] = strconv.Itoa(i)
	}
	lens := make([]string, 500)
	for i := range lens {
		lens[i] = strconv.Itoa(i + 1)
	}
	spec := "name: big\ngrid:\n  seed: [" + strings.Join(seeds, ", ") + "]\n  seq_len: [" + strings.Join(lens, ", ") + "]\n"
	start := time.Now()
	plan, err := Parse([]byte(spec), "big.yaml", Options{})
	require.NoError(t, err)
	t.Logf("expanded %d runs in %v", len(plan.Runs), time.Since(start))
	require.Len(t, plan.Runs, 300_000)
	ids := make(map[string]struct{}, len(plan.Runs))
	for _, rc := range plan.Runs {
		ids[rc.ID] = struct{}{}
	}
	assert.Len(t, ids, 300_000)
	assert.Equal(t, plan.Runs[0].Slug, plan.Runs[299_999].Slug, "every point shares one slug: only the hash tells them apart")
}

// TestMigrateID: a config stored under its legacy ID gets its current ID; other
// IDs (current, hand-made, empty) are left alone.
func TestMigrateID(t *testing.T) {
	rc := goldenConfig()
	rc.AssignID()
	cur := rc.ID

	old := rc
	old.ID, old.Slug = rc.LegacyID(), rc.MakeSlug()
	assert.True(t, old.MigrateID())
	assert.Equal(t, cur, old.ID)
	assert.Equal(t, rc.Slug, old.Slug)

	for _, id := range []string{cur, "", "my-run", rc.MakeSlug() + "-00000000"} {
		c := rc
		c.ID = id
		assert.False(t, c.MigrateID(), id)
		assert.Equal(t, id, c.ID)
	}
}
