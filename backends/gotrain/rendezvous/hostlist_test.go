package rendezvous

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		list string
		want []string
	}{
		{"node1", []string{"node1"}},
		{"a,b,c", []string{"a", "b", "c"}},
		{"node[01-04,07],gpu5", []string{"node01", "node02", "node03", "node04", "node07", "gpu5"}},
		{"n[8-10]", []string{"n8", "n9", "n10"}},
		{"n[08-10]", []string{"n08", "n09", "n10"}},
		{"n[007]", []string{"n007"}},
		{"rack[1-2]-n[1-2]", []string{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
		{"gpu-[3,1]x", []string{"gpu-3x", "gpu-1x"}},
		{"[1-2]", []string{"1", "2"}},
		{"a,,b,", []string{"a", "b"}},
		{"host.example.com,10.0.0.1", []string{"host.example.com", "10.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			got, err := ExpandHostlist(tt.list)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			first, err := FirstHost(tt.list)
			require.NoError(t, err)
			assert.Equal(t, tt.want[0], first)
		})
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	tests := []struct{ list, want string }{
		{"", "empty"},
		{",", "empty"},
		{"n[1-2", "never closed"},
		{"n1-2]", "without '['"},
		{"n[[1]]", "nested"},
		{"n[]", "empty brackets"},
		{"n[3-1]", "runs backwards"},
		{"n[a-b]", "not a number"},
		{"n[1-]", "missing number"},
		{"n[-1]", "missing number"},
		{"n[1,,2]", "missing number"},
		{"n[1234567890123456789]", "more than 18 digits"},
		{"a, b", "whitespace"},
		{"n[0-999999999]", "more than"},
		{"a[0-255]b[0-255]c[0-1]", "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			_, err := ExpandHostlist(tt.list)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	// FirstHost does not expand, so a huge but valid list has a first host.
	first, err := FirstHost("n[0-999999999]")
	require.NoError(t, err)
	assert.Equal(t, "n0", first)
}

func TestTasksOnNode(t *testing.T) {
	tests := []struct {
		spec string
		node int
		want int
	}{
		{"4", 0, 4},
		{"2(x3),1", 0, 2},
		{"2(x3),1", 2, 2},
		{"2(x3),1", 3, 1},
		{"1,2,3", 1, 2},
		{"8(x1000000000)", 999999999, 8},
	}
	for _, tt := range tests {
		got, err := TasksOnNode(tt.spec, tt.node)
		require.NoError(t, err, "%q node %d", tt.spec, tt.node)
		assert.Equal(t, tt.want, got, "%q node %d", tt.spec, tt.node)
	}
	for _, bad := range []struct {
		spec string
		node int
		want string
	}{
		{"", 0, "empty"},
		{"2(x3)", 3, "lists 3 nodes"},
		{"x", 0, "not a positive task count"},
		{"0", 0, "not a positive task count"},
		{"2(3)", 0, "COUNT(xNODES)"},
		{"2(x3", 0, "COUNT(xNODES)"},
		{"2(x0)", 0, "not a positive node count"},
		{"2", -1, "negative"},
	} {
		_, err := TasksOnNode(bad.spec, bad.node)
		require.Error(t, err, "%q", bad.spec)
		assert.Contains(t, err.Error(), bad.want)
	}
}

func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"node[01-04,07],gpu5", "rack[1-2]-n[1-2]", "a,,b", "n[8-10]", "[", "]", "n[0-999999999]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		hosts, err := ExpandHostlist(list)
		first, ferr := FirstHost(list)
		if err != nil {
			// Only the size cap may fail expansion of a list FirstHost accepts.
			if ferr == nil && !strings.Contains(err.Error(), "more than") {
				t.Fatalf("FirstHost accepts %q but ExpandHostlist says %v", list, err)
			}
			return
		}
		if ferr != nil || len(hosts) == 0 || len(hosts) > MaxHosts {
			t.Fatalf("%q: %d hosts, FirstHost error %v", list, len(hosts), ferr)
		}
		if hosts[0] != first {
			t.Fatalf("%q: first host %q, FirstHost %q", list, hosts[0], first)
		}
		for _, h := range hosts {
			if h == "" || strings.ContainsAny(h, "[],") {
				t.Fatalf("%q expanded to host %q", list, h)
			}
		}
	})
}

func FuzzTasksOnNode(f *testing.F) {
	f.Add("2(x3),1", 3)
	f.Add("4", 0)
	f.Fuzz(func(t *testing.T, spec string, node int) {
		n, err := TasksOnNode(spec, node)
		if err == nil && n < 1 {
			t.Fatalf("%q node %d: %d tasks without an error", spec, node, n)
		}
	})
}
