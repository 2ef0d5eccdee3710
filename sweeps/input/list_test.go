package input

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestClipList (issue 39 item 10): a list of thousands of names read from a
// file is cut to the first few and a count; a short list is whole.
func TestClipList(t *testing.T) {
	assert.Equal(t, "", ClipList(nil, 0))
	assert.Equal(t, "a, b", ClipList([]string{"a", "b"}, 0))
	var keys []string
	for i := range 3000 {
		keys = append(keys, fmt.Sprintf("my-gpu-%04d/gotrain", i))
	}
	got := ClipList(keys, 0)
	assert.True(t, strings.HasSuffix(got, "my-gpu-0007/gotrain and 2992 more"), got)
	assert.Less(t, len(got), 200)
	assert.Equal(t, "x, y and 1 more", ClipList([]string{"x", "y", "z"}, 2))
	long := ClipList([]string{strings.Repeat("k", 5000)}, 0)
	assert.Less(t, len(long), 120, "a name is cut too")
}
