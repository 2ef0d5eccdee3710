package sweeps

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxSearchBatch is the largest batch_per_device a max_fit search tries.
const MaxSearchBatch = 65536

// NextSearchPoint returns the next point of rc's adaptive search: under max_fit,
// batch_per_device doubled, global_batch re-derived, a new ID and the same
// SearchGroup. It returns false when rc is not a search point or the next value
// would pass MaxSearchBatch.
func NextSearchPoint(rc RunConfig) (RunConfig, bool) {
	if rc.Search != "batch_per_device" || rc.BatchPerDevice < 1 || rc.BatchPerDevice > MaxSearchBatch/2 {
		return rc, false
	}
	next := rc
	next.BatchPerDevice *= 2
	next.GlobalBatch = next.WorldSize * next.BatchPerDevice * next.GradAccum
	if next.SearchGroup == "" {
		next.SearchGroup = searchGroup(rc)
	}
	next.AssignID()
	return next, true
}

// searchGroup names a search: the run's slug without its batch size, plus a hash of
// the training configuration with batch_per_device (and the global batch it
// implies) left out, e.g. "ws8-full_shard-ac0-pre-1f2e3d4c".
func searchGroup(rc RunConfig) string {
	rc.BatchPerDevice, rc.GlobalBatch = 0, 0
	var buf [160]byte
	slug := strings.Replace(string(rc.appendSlug(buf[:0])), "-bs0", "", 1)
	var kb [512]byte
	sum := sha256.Sum256(rc.appendTrainingKey(kb[:0]))
	return slug + "-" + hex.EncodeToString(sum[:4])
}
