package input

import (
	"fmt"
	"strings"
)

// ListShown is how many items ClipList names before "and N more".
const ListShown = 8

// ClipList renders the names read from an input file (the keys of a
// calibration file, say) for a message: joined with ", ", at most max of them
// (ListShown where max <= 0), then "and N more", each name cut as Clip cuts
// it. A file of thousands of keys would otherwise make one message line of
// tens of kilobytes.
func ClipList(names []string, max int) string {
	if max <= 0 {
		max = ListShown
	}
	shown := names[:min(len(names), max)]
	out := make([]string, len(shown))
	for i, s := range shown {
		out[i] = Clip(s, 64)
	}
	s := strings.Join(out, ", ")
	if more := len(names) - len(shown); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}
