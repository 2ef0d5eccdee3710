package contract

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An argument no program can receive — a NUL, or longer than Linux's
// MAX_ARG_STRLEN — is refused when the template is expanded (at preflight),
// naming the element, not when the run starts.
func TestExpandRefusesArgumentsNoProgramTakes(t *testing.T) {
	_, err := Expand("backend_options.args", []string{"--ok", "--x=a\x00b"}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `backend_options.args[1] "--x=a\x00b": byte 6 is a NUL`)

	long := "--x=" + strings.Repeat("a", MaxArgBytes)
	_, err = Expand("backend_options.args", []string{long}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "backend_options.args[0]")
	assert.Contains(t, err.Error(), "more than the 131071 one argument may hold on Linux")

	_, err = Expand("backend_options.args", []string{"--x=" + strings.Repeat("a", MaxArgBytes-4)}, nil)
	assert.NoError(t, err, "the longest argument Linux takes")
}
