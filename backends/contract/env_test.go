package contract

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestWithEnv: the spec's variables replace inherited entries of the same name
// and come last, sorted; the rest of the environment is kept in order.
func TestWithEnv(t *testing.T) {
	environ := []string{"PATH=/bin", "NCCL_ALGO=Tree", "HOME=/h", "NOEQUALS"}
	got := WithEnv(environ, map[string]string{"NCCL_ALGO": "Ring", "A_B": "x=y"})
	assert.Equal(t, []string{"PATH=/bin", "HOME=/h", "NOEQUALS", "A_B=x=y", "NCCL_ALGO=Ring"}, got)
	assert.Equal(t, []string{"PATH=/bin", "NCCL_ALGO=Tree", "HOME=/h", "NOEQUALS"}, environ, "environ untouched")
	assert.Equal(t, environ, WithEnv(environ, nil))
	assert.Equal(t, map[string]string{"X": "got", "Y": ""}, Received(map[string]string{"X": "a", "Y": "b"},
		func(k string) string { return map[string]string{"X": "got"}[k] }))
}
