package protocol

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
)

// TestDescriptionFieldsAreBounded: each field of a description within the reply's
// bound is checked too, naming the field; a description at the bounds passes.
func TestDescriptionFieldsAreBounded(t *testing.T) {
	enc := func(d backends.Description) []byte {
		b, err := json.Marshal(d)
		require.NoError(t, err)
		return b
	}
	_, err := DecodeDescription(enc(backends.Description{Name: "x", Summary: strings.Repeat("s", MaxTextBytes)}))
	require.NoError(t, err)
	for _, tc := range []struct {
		d    backends.Description
		want string
	}{
		{backends.Description{Summary: strings.Repeat("s", MaxTextBytes+1)}, "its summary is 4097 bytes, more than 4096"},
		{backends.Description{Reason: strings.Repeat("r", 100_000)}, "its reason is 100000 bytes, more than 4096"},
		{backends.Description{Name: strings.Repeat("n", 300)}, "its name is 300 bytes, more than 256"},
		{backends.Description{Axes: map[string][]string{"sharding": make([]string, 5000)}}, `axis "sharding" has 5000 values, more than 4096`},
		{backends.Description{Axes: map[string][]string{"hardware": {strings.Repeat("h", 1000)}}}, `axis "hardware" has a value of 1000 bytes, more than 256`},
	} {
		_, err := DecodeDescription(enc(tc.d))
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err = DecodeDescription([]byte(`{"summary": 3`))
	assert.ErrorContains(t, err, "unreadable description")
}

// FuzzPluginReplies decodes what a plugin may send as the host does: a
// description (Describe's description_json) and a log event. Whatever comes in,
// an accepted description has every field within its bound, and an event's line
// is at most MaxLineBytes and the cut note.
func FuzzPluginReplies(f *testing.F) {
	for _, s := range []string{
		`{"name": "x", "summary": "s", "available": true, "axes": {"sharding": ["full_shard"]}}`,
		`{"summary": "` + strings.Repeat("s", MaxTextBytes+1) + `"}`,
		`{"axes": {"a": ["` + strings.Repeat("v", 300) + `"]}}`, `null`, `{"axes": null}`, `[]`,
	} {
		f.Add([]byte(s), "line", "stdout")
	}
	f.Add([]byte(`{}`), strings.Repeat("x", contract.MaxLineBytes+10), strings.Repeat("k", 300))
	f.Fuzz(func(t *testing.T, data []byte, line, stream string) {
		if d, err := DecodeDescription(data); err == nil {
			if len(d.Summary) > MaxTextBytes || len(d.Reason) > MaxTextBytes || len(d.Name) > maxNameBytes || len(d.Axes) > maxAxes {
				t.Fatalf("accepted a description past the bounds: %d/%d/%d bytes, %d axes", len(d.Name), len(d.Summary), len(d.Reason), len(d.Axes))
			}
			for k, vs := range d.Axes {
				if len(k) > maxNameBytes || len(vs) > maxAxisValues {
					t.Fatalf("accepted axis %q with %d values", k, len(vs))
				}
			}
		}
		ev, err := CheckEvent(backends.Event{Kind: backends.EventLog, Stream: stream, Line: line})
		if err != nil {
			if len(stream) <= maxNameBytes {
				t.Fatalf("refused a stream of %d bytes: %v", len(stream), err)
			}
			return
		}
		if len(ev.Line) > contract.MaxLineBytes+100 {
			t.Fatalf("an event line of %d bytes passed", len(ev.Line))
		}
		if len(line) <= contract.MaxLineBytes && ev.Line != line {
			t.Fatalf("a line within the bound was changed")
		}
	})
}
