package contract

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestScanLinesBoundsLongLines: a line past MaxLineBytes is handed cut, saying how
// long it was, and the lines after it still arrive; short lines, an empty line and
// a last line without a newline arrive whole.
func TestScanLinesBoundsLongLines(t *testing.T) {
	long := strings.Repeat("x", 3*MaxLineBytes+5)
	in := "first\n\n" + long + "\nafter\nlast"
	var got []string
	require.NoError(t, ScanLines(strings.NewReader(in), func(l string) { got = append(got, l) }))
	require.Len(t, got, 5)
	assert.Equal(t, []string{"first", ""}, got[:2])
	assert.Equal(t, []string{"after", "last"}, got[3:])
	assert.True(t, strings.HasPrefix(got[2], long[:MaxLineBytes]+" [fsdpbench: line of "))
	assert.Less(t, len(got[2]), MaxLineBytes+100)
	n, cut := LineCut(got[2])
	assert.True(t, cut)
	assert.Equal(t, int64(len(long)), n)
	_, cut = LineCut(got[0])
	assert.False(t, cut)
}

// TestRunGroupReadsPastAHugeStepLine runs a script that prints a 50 MB FSDPBENCH
// line and then a good one. The reader used to stop at the first (bufio.Scanner's
// ErrTooLong), so no later step line was read and torchrun reported "no FSDPBENCH
// lines"; now the huge line is refused saying why and the next one is read.
func TestRunGroupReadsPastAHugeStepLine(t *testing.T) {
	script := `import sys
sys.stdout.write('FSDPBENCH {"step": 1, "loss": 2.0, "step_time_s": 0.1, "tokens": 8, "pad": "' + 'x' * 50_000_000 + '"}\n')
sys.stdout.write('FSDPBENCH {"step": 2, "loss": 1.5, "step_time_s": 0.1, "tokens": 8}\n')
`
	var (
		mu    sync.Mutex
		steps []int
		errs  []string
		sink  bytes.Buffer
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started, err := RunGroup(ctx, exec.Command("/usr/bin/python3", "-c", script), time.Second, Lines{
		Stdout: func(line string) {
			st, ok, err := ParseStepLine(line)
			mu.Lock()
			defer mu.Unlock()
			if ok {
				steps = append(steps, st.Step.Step)
			}
			if err != nil {
				errs = append(errs, err.Error())
			}
		},
		StdoutSink: &sink,
	})
	require.True(t, started)
	require.NoError(t, err)
	assert.Equal(t, []int{2}, steps, "the step line after the huge one is read")
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0], "step line is 50000078 bytes, more than the 1048576 bytes a line may have")
	assert.Less(t, len(errs[0]), 1000, "the error quotes a bounded part of the line")
	assert.Less(t, sink.Len(), 2*MaxLineBytes, "the copy for the log is bounded too")
}
