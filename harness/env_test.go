package harness

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestInheritedEnv: the tuning variables inherited and not given by the spec,
// apart from the ones it gave and from unrelated variables.
func TestInheritedEnv(t *testing.T) {
	got := inheritedEnv([]string{"PATH=/bin", "NCCL_DEBUG=INFO", "NCCL_ALGO=Tree", "OMP_NUM_THREADS=4",
		"CUDA_VISIBLE_DEVICES=0", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}, map[string]string{"NCCL_ALGO": "Ring"})
	assert.Equal(t, map[string]string{"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4",
		"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, got)
	assert.Nil(t, inheritedEnv([]string{"PATH=/bin"}, nil))
}
