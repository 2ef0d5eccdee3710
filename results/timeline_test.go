package results

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckTimelineRefusesWhatIsNoTimeline (issue 39, item 3): every file
// report --timeline offered to Perfetto without reading it is refused, saying
// what is wrong, where; a FIFO, a directory, a link to /dev/zero and a link loop
// are named as such (they read as "the backend wrote no timeline.json"), and a
// FIFO does not block.
func TestCheckTimelineRefusesWhatIsNoTimeline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	sized := func(name string, n int64) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(n)) // sparse: nothing is written, nothing need be read
		require.NoError(t, f.Close())
		return p
	}
	ev := func(ts, dur string) string {
		return `{"traceEvents": [{"name": "step 1", "ph": "X", "ts": ` + ts + `, "dur": ` + dur + `, "pid": 0, "tid": 0}]}`
	}
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	loop := filepath.Join(dir, "loop")
	require.NoError(t, os.Symlink(loop, loop))
	zero := filepath.Join(dir, "zero")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	dangling := filepath.Join(dir, "dangling")
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone.json"), dangling))
	sub := filepath.Join(dir, "adir")
	require.NoError(t, os.Mkdir(sub, 0o755))

	for _, tc := range []struct{ name, path, want string }{
		{"not JSON", write("notjson", "hello, Perfetto"), ":1:1: not JSON: invalid character 'h'"},
		{"empty", write("empty", ""), "is empty"},
		{"nested", write("nested", strings.Repeat("[", 100_000)), ":1:33: the timeline nests arrays and objects deeper than 32 levels"},
		{"101 MiB", sized("big101", 101<<20), "is 101 MiB (105906176 bytes), more than the 50000000 bytes (50 MB) a timeline may have"},
		{"130 MiB", sized("big130", 130<<20), "is 130 MiB (136314880 bytes), more than the 50000000 bytes (50 MB)"},
		{"negative dur", write("negdur", ev("5", "-3")), `:1:18: event 0 ("step 1"): dur -3 is not a time in µs from 0 to 1e+17`},
		{"negative ts", write("negts", ev("-5", "3")), `event 0 ("step 1"): ts -5 is not a time in µs`},
		{"NaN dur", write("nandur", ev("5", "NaN")), ":1:64: not JSON: invalid character 'N'"},
		{"huge dur", write("hugedur", ev("5", "1e400")), "dur 1e400 is not a time in µs"},
		{"string dur", write("strdur", ev("5", `"3"`)), `dur is a string, not a number of µs`},
		{"no dur", write("nodur", `[{"name": "x", "ph": "X", "ts": 1}]`), `event 0 ("x") is a complete event (ph "X") without dur`},
		{"no ph", write("noph", `[{"name": "x", "ts": 1, "dur": 1}]`), `event 0 ("x") has no ph`},
		{"numbers", write("numbers", "[1,2,3]"), ":1:2: event 0 is a number, not an event"},
		{"null", write("null", "null"), ":1:1: the file is null, not a Chrome trace"},
		{"no events", write("noevents", `{"traceEvents": []}`), "holds no events"},
		{"no traceEvents", write("notrace", `{"otherData": {}}`), "the object has no traceEvents"},
		{"traceEvents not a list", write("tenum", `{"traceEvents": 5}`), ":1:17: traceEvents is a number, not a list of events"},
		{"cut", write("cut", `{"traceEvents": [{"ph": "M"}`), "the file ends in the middle of the trace"},
		{"trailing", write("trailing", `[{"ph": "M"}] [{"ph": "M"}]`), ":1:15: more follows the trace"},
		{"key twice", write("twice", `[{"ph": "X", "ts": 1, "dur": 5, "dur": -1}]`), "the key \"dur\" is given twice"},
		{"FIFO", fifo, "is a FIFO (named pipe), not a timeline file"},
		{"directory", sub, "is a directory, not a timeline file"},
		{"link to /dev/zero", zero, `is a symbolic link to "/dev/zero", a character device, not a timeline file`},
		{"link loop", loop, "is a symbolic link that loops (too many levels of symbolic links)"},
		{"dangling link", dangling, "which does not exist"},
	} {
		start := time.Now()
		_, err := CheckTimeline(tc.path)
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.path, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
		assert.False(t, errors.Is(err, fs.ErrNotExist), "%s is no absent timeline", tc.name)
		assert.Less(t, time.Since(start), 5*time.Second, "%s: nothing blocks", tc.name)
	}

	_, err := CheckTimeline(filepath.Join(dir, "absent.json"))
	assert.ErrorIs(t, err, ErrNoTimeline)
	assert.ErrorIs(t, err, fs.ErrNotExist)

	// What the backends write passes: the object form with metadata events,
	// and the list form.
	info, err := CheckTimeline(write("good.json", `{"traceEvents":[
{"name":"process_name","ph":"M","pid":0,"args":{"name":"rank 0"}},
{"name":"step 1","cat":"step","ph":"X","ts":0,"dur":1250.5,"pid":0,"tid":0,"args":{"step":1}}
],
"displayTimeUnit":"ms",
"otherData":{"engine":"gotrain","truncated":false}}
`))
	require.NoError(t, err)
	assert.Equal(t, 2, info.Events)
	info, err = CheckTimeline(write("list.json", `[{"name": "x", "ph": "X", "ts": 1, "dur": 0, "pid": "CPU functions", "tid": 1}]`))
	require.NoError(t, err)
	assert.Equal(t, 1, info.Events)
}

// TestCreateTempFollowsTheUmask (issue 39, item 3): a timeline's temporary file
// (renamed over timeline.json) gets 0666 less the umask, as every result file;
// os.CreateTemp's 0600 left gotrain's timeline unreadable to the group.
func TestCreateTempFollowsTheUmask(t *testing.T) {
	// Not parallel: the umask is the process's.
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	f, err := CreateTemp(t.TempDir(), ".timeline-")
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o644), st.Mode().Perm())
}
