package contract

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
)

// MaxLineBytes bounds one line of a run's output as the backends read it (the
// FSDPBENCH step lines, the gotrain workers' events, the lines copied into the
// run's logs): 1 MiB, far past any real step line or log line. A script that
// prints a 50 MB line (a tensor, a progress bar without newlines) must neither
// make fsdpbench hold it in memory nor stop the reading of every line after it.
const MaxLineBytes = 1 << 20

// cutNote is appended to a line ScanLines cut; LineCut reads it back.
const cutNote = " [fsdpbench: line of %d bytes cut after %d]"

var cutRE = regexp.MustCompile(` \[fsdpbench: line of ([0-9]+) bytes cut after [0-9]+\]$`)

// ScanLines reads r to its end and hands f each line, without its newline, in
// order. A line longer than MaxLineBytes is handed cut: its first MaxLineBytes
// bytes followed by a note saying how long it was (LineCut tells such a line),
// and the reading goes on with the next line. Memory stays within MaxLineBytes
// plus a read buffer whatever r holds. The error is r's, never io.EOF.
func ScanLines(r io.Reader, f func(line string)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	var total int64 // bytes of the current line, the cut ones included
	for {
		frag, err := br.ReadSlice('\n')
		end := len(frag) > 0 && frag[len(frag)-1] == '\n'
		if end {
			frag = frag[:len(frag)-1]
		}
		total += int64(len(frag))
		if room := MaxLineBytes - len(line); room > 0 {
			line = append(line, frag[:min(room, len(frag))]...)
		}
		if end || (err != nil && !errors.Is(err, bufio.ErrBufferFull) && total > 0) {
			s := string(line)
			if total > MaxLineBytes {
				s += fmt.Sprintf(cutNote, total, MaxLineBytes)
			}
			f(s)
			line, total = line[:0], 0
			if cap(line) > 64<<10 {
				line = nil // one huge line does not pin its buffer for the rest
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
	}
}

// LineCut reports whether ScanLines cut line, and how many bytes the line had.
func LineCut(line string) (n int64, cut bool) {
	m := cutRE.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	return n, err == nil && n > MaxLineBytes
}

// LineTooLong is the error of a parser given a line ScanLines cut, naming what
// the line was and the bound; "" when line was not cut.
func LineTooLong(what, line string) error {
	n, cut := LineCut(line)
	if !cut {
		return nil
	}
	return fmt.Errorf("%s is %d bytes, more than the %d bytes a line may have, so it was cut and cannot be read (print one short line per step): %s",
		what, n, MaxLineBytes, quoteLine(line))
}

// CutLine is line bounded as ScanLines bounds the lines it reads: whole when it
// has at most MaxLineBytes bytes, else its first MaxLineBytes followed by the note
// LineCut reads. For lines that arrive whole (a plugin's log events).
func CutLine(line string) string {
	if len(line) <= MaxLineBytes {
		return line
	}
	return line[:MaxLineBytes] + fmt.Sprintf(cutNote, len(line), MaxLineBytes)
}

// CutPrefix is what ScanLines hands on for a line of total bytes whose first
// bytes are prefix (at least MaxLineBytes of them, or all the line had): the line
// itself when total is within the bound, else its first MaxLineBytes bytes and
// the cut note. For readers that see a line in pieces (a file followed as it
// grows) and keep only its start.
func CutPrefix(prefix string, total int64) string {
	if total <= MaxLineBytes {
		return prefix
	}
	return prefix[:min(len(prefix), MaxLineBytes)] + fmt.Sprintf(cutNote, total, MaxLineBytes)
}
