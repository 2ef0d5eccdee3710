package probe

import (
	"os"
	"testing"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

func TestWide(t *testing.T) {
	data, _ := os.ReadFile("/tmp/inp/wide.yaml")
	t.Log(input.CheckYAML("w", data, input.Spec))
}
