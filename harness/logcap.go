package harness

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// Bounds of a run's log files (stdout.log, stderr.log). A script that prints
// without end (a progress bar per batch, a tensor per step) once grew them to
// 368 MB and 382 MB: each is now at most MaxLogBytes, its first LogHeadBytes and
// its last LogTailBytes, where the start says how the run began and the end why
// it ended, with one line between them saying how much was cut.
const (
	// LogHeadBytes is how much of the start of a log is kept, written as it comes.
	LogHeadBytes = 24 << 20
	// LogTailBytes is how much of the end of a log is kept, held in memory while
	// the run goes on and written when it ends.
	LogTailBytes = 8 << 20
	// MaxLogBytes is the most a log holds, the cut note aside.
	MaxLogBytes = LogHeadBytes + LogTailBytes
)

// cappedLog writes the first head bytes to f as they come, keeps the last tail
// bytes after those in memory, and writes them after a cut note on close.
// Not safe for concurrent use: runLogs serializes the writes.
type cappedLog struct {
	f          *os.File
	head, tail int
	written    int    // bytes written to f so far, at most head
	end        []byte // the bytes past head, of which the last tail are kept
	dropped    int64  // bytes past head that end no longer holds
	closed     bool
}

func newCappedLog(f *os.File, head, tail int) *cappedLog {
	return &cappedLog{f: f, head: head, tail: tail}
}

// Write never fails for the caller: a log that cannot be written must not fail
// the run.
func (c *cappedLog) Write(p []byte) (int, error) {
	n := len(p)
	if c.closed {
		return n, nil // a backend abandoned after its grace writes on: dropped
	}
	if room := c.head - c.written; room > 0 {
		k := min(room, len(p))
		_, _ = c.f.Write(p[:k])
		c.written += k
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if len(p) >= c.tail {
		c.dropped += int64(len(c.end) + len(p) - c.tail)
		c.end = append(c.end[:0], p[len(p)-c.tail:]...)
		return n, nil
	}
	c.end = append(c.end, p...)
	if over := len(c.end) - c.tail; over > c.tail {
		// Trimmed in halves, so each byte is copied about once.
		c.dropped += int64(over)
		c.end = append(c.end[:0], c.end[over:]...)
	}
	return n, nil
}

// Close writes the kept end, after a note saying how much was cut when anything
// was, and closes f.
func (c *cappedLog) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	end := c.end
	if over := len(end) - c.tail; over > 0 {
		c.dropped += int64(over)
		end = end[over:]
	}
	if c.dropped > 0 {
		// The kept end starts at a line's start, where one is near.
		if i := bytes.IndexByte(end, '\n'); i >= 0 && i < 64<<10 {
			c.dropped += int64(i + 1)
			end = end[i+1:]
		}
		note := fmt.Sprintf("[fsdpbench: %s cut here; a log keeps its first %d MiB and last %d MiB]\n",
			megabytes(c.dropped), c.head>>20, c.tail>>20)
		if c.written > 0 && !c.endsLine() {
			note = "\n" + note
		}
		_, _ = io.WriteString(c.f, note)
	}
	_, _ = c.f.Write(end)
	c.end = nil
	return c.f.Close()
}

// endsLine reports whether the head written so far ends with a newline.
func (c *cappedLog) endsLine() bool {
	var b [1]byte
	if _, err := c.f.ReadAt(b[:], int64(c.written)-1); err != nil {
		return true // not readable (opened write-only): a newline costs nothing
	}
	return b[0] == '\n'
}

// megabytes shows n bytes as the note says them: "312 MB", "1.5 MB", "900 bytes".
func megabytes(n int64) string {
	switch {
	case n >= 100e6:
		return fmt.Sprintf("%.0f MB", float64(n)/1e6)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%d bytes", n)
}
