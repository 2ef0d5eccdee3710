package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

const fixtures = "testdata/nccl-tests"

func TestReadNCCLTests(t *testing.T) {
	tests := []struct {
		file       string
		collective string
		ranks      int
		nodes      int
		// busbw (GB/s) nccl-tests printed at 4 GiB
		at4G float64
	}{
		{"all_gather_perf.txt", AllGather, 8, 1, 359.40},
		{"reduce_scatter_perf.txt", ReduceScatter, 8, 1, 349.43},
		{"all_reduce_perf_2nodes.txt", AllReduce, 16, 2, 378.33},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r, err := ReadNCCLTests(filepath.Join(fixtures, tt.file))
			require.NoError(t, err)
			assert.Equal(t, tt.collective, r.Collective)
			assert.Equal(t, tt.ranks, r.Ranks)
			assert.Equal(t, tt.nodes, r.Nodes)
			require.NotEmpty(t, r.Curve)
			last := r.Curve[len(r.Curve)-1]
			assert.Equal(t, float64(4<<30), last.SizeBytes)
			assert.InDelta(t, tt.at4G*1e9, last.BusBW, 0.01e9)
			for i := 1; i < len(r.Curve); i++ {
				assert.Less(t, r.Curve[i-1].SizeBytes, r.Curve[i].SizeBytes, "sorted")
			}
			// Between two rows the curve interpolates in log(size); at a row it is
			// the row.
			assert.Equal(t, last.BusBW, r.Curve.At(last.SizeBytes))
			assert.Equal(t, last.BusBW, r.Curve.At(1e15), "past the sweep: the last row")
			mid := r.Curve.At(2 << 30)
			assert.Greater(t, mid, r.Curve.At(1<<30))
			assert.Less(t, mid, last.BusBW)
		})
	}
}

func TestParseNCCLTestsErrors(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(fixtures, "all_gather_perf.txt"))
	require.NoError(t, err)
	lines := strings.Split(string(good), "\n")
	// The first data row is line 17 of the fixture (1-based).
	const firstRow = 17
	require.True(t, strings.HasPrefix(strings.TrimSpace(lines[firstRow-1]), "1024"))
	edit := func(line int, with string) string {
		l := append([]string(nil), lines...)
		l[line-1] = with
		return strings.Join(l, "\n")
	}
	row := strings.Fields(lines[firstRow-1])
	setCol := func(col int, v string) string {
		f := append([]string(nil), row...)
		f[col] = v
		return edit(firstRow, strings.Join(f, "  "))
	}
	tests := []struct {
		name, path, data, want string
	}{
		{"short row", "ag.txt", edit(firstRow, "1024 64 float none -1 5.0 0.2"), "ag.txt:17: a data row has 7 columns, want 13"},
		{"bad size", "ag.txt", setCol(0, "1e3x"), `ag.txt:17: size "1e3x" must be a whole number`},
		{"huge size", "ag.txt", setCol(0, "9999999999999999"), "must be a whole number of bytes in [1, 1099511627776]"},
		{"negative busbw", "ag.txt", setCol(7, "-3"), `ag.txt:17: out-of-place busbw "-3" must be a number of GB/s in [0, 20000]`},
		{"nan busbw", "ag.txt", setCol(7, "nan"), `busbw "nan"`},
		{"absurd busbw", "ag.txt", setCol(7, "1e9"), "in [0, 20000]"},
		{"wrong values", "ag.txt", setCol(8, "12"), "ag.txt:17: 12 wrong values at size 1024: the collective returned bad data"},
		{"bad wrong count", "ag.txt", setCol(12, "x"), `#wrong "x" must be a count or N/A`},
		{"unknown collective", "ag.txt", edit(1, "# Collective test starting: sendrecv_perf"), `ag.txt:1: collective "sendrecv_perf" is not`},
		{"no banner, unnamed file", "out.txt", edit(1, "#"), "cannot tell which collective"},
		{"no rank lines", "ag.txt", strings.Join(append(append([]string{}, lines[:4]...), lines[12:]...), "\n"), "no \"#  Rank N Group G Pid P on HOST device D\" lines"},
		{"no rows", "ag.txt", strings.Join(lines[:16], "\n"), "no data row with a busbw above 0"},
		{"not nccl-tests", "ag.txt", "hello world\n", "ag.txt:1: a data row has 2 columns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseNCCLTests(tt.path, []byte(tt.data))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}

	// Without the banner, the file's name says which collective; N/A (validation
	// off) is accepted.
	r, err := ParseNCCLTests("x/reduce_scatter_perf-16.log", []byte(strings.Replace(edit(1, "#"), "      0\n", "    N/A\n", 1)))
	require.NoError(t, err)
	assert.Equal(t, ReduceScatter, r.Collective)

	// Too large a file is refused before it is read whole.
	big := filepath.Join(t.TempDir(), "all_gather_perf.txt")
	require.NoError(t, os.WriteFile(big, []byte(strings.Repeat("#\n", maxNCCLBytes)), 0o644))
	_, err = ReadNCCLTests(big)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nccl-tests output")
}

func FuzzParseNCCLTests(f *testing.F) {
	for _, name := range []string{"all_gather_perf.txt", "reduce_scatter_perf.txt", "all_reduce_perf_2nodes.txt"} {
		b, err := os.ReadFile(filepath.Join(fixtures, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseNCCLTests("all_reduce_perf.txt", data)
		if err != nil {
			return
		}
		for _, p := range r.Curve {
			if !(p.BusBW > 0 && p.BusBW <= maxBusBWGBps*1e9 && p.SizeBytes >= 1 && p.SizeBytes <= maxNCCLSize) {
				t.Fatalf("point out of bounds: %+v", p)
			}
		}
	})
}

func TestFabricProfiles(t *testing.T) {
	require.Equal(t, []string{"ib-rail-8x200g", "ib-rail-8x400g", "nvlink3-8gpu", "nvlink4-8gpu", "tcp"}, FabricNames())
	for _, name := range FabricNames() {
		l, err := Fabric(name)
		require.NoError(t, err)
		for _, c := range []string{AllGather, ReduceScatter, AllReduce} {
			curve := l.curve(c)
			require.NotEmpty(t, curve, "%s %s", name, c)
			assert.Less(t, curve.At(1<<10), curve.At(1<<30), "%s: small messages are latency bound", name)
		}
	}
	_, err := Fabric("infiniband")
	assert.ErrorContains(t, err, "profiles are ib-rail-8x200g")

	// Two nodes × 8 of Mistral 7B: over TCP much slower than over rail-optimized
	// 400G InfiniBand, and the 400G fabric's busbw (≈ 400 GB/s at large sizes) is
	// far above one NIC's 50 GB/s.
	rc := cfg("mistral-7b", 16, sweeps.FullShard)
	rc.Nodes, rc.GPUsPerNode = 2, 8
	ib := mustPredict(t, withOpts(rc, "inter_node_fabric", "ib-rail-8x400g"))
	tcp := mustPredict(t, withOpts(rc, "inter_node_fabric", "tcp"))
	nic := mustPredict(t, withOpts(rc, "inter_node_bus_bw_gbps", 50))
	assert.Greater(t, ib.TokensPerS, nic.TokensPerS)
	assert.Greater(t, nic.TokensPerS, tcp.TokensPerS)
	// The curve's value at one unit's gathered bytes is what the all-gathers run at.
	l, _ := Fabric("ib-rail-8x400g")
	msg := float64(ib.Shape.BlockParams() * 2)
	P, root := float64(ib.Shape.Params()), float64(ib.Shape.Params()-int64(ib.Shape.Layers)*ib.Shape.BlockParams())
	want := ringTime((2*P-root)*2, 16, false, l[AllGather].At(msg)) + ringTime(P*2, 16, false, l[ReduceScatter].At(msg))
	assert.InEpsilon(t, want+fullShardLatency(ib, 16, 2), ib.CommS, 1e-9)
}

func TestNCCLTestsOption(t *testing.T) {
	rc := cfg("llama-1b", 16, sweeps.FullShard)
	rc.Nodes, rc.GPUsPerNode = 2, 8
	files := []any{filepath.Join(fixtures, "all_reduce_perf_2nodes.txt"), filepath.Join(fixtures, "all_gather_perf.txt")}
	opts, err := ParseOptions(map[string]any{"nccl_tests": files})
	require.NoError(t, err)
	// A two-node run's curve is the inter-node one; a one-node run's the intra one.
	assert.Contains(t, opts.Links.Inter, AllReduce)
	assert.Contains(t, opts.Links.Intra, AllGather)
	// Across nodes only all_reduce was measured: all-gather and reduce-scatter
	// fall back to it.
	p := mustPredict(t, withOpts(rc, "nccl_tests", files))
	msg := float64(p.Shape.BlockParams() * 2)
	bw := opts.Links.Inter[AllReduce].At(msg)
	P, root := float64(p.Shape.Params()), float64(p.Shape.Params()-int64(p.Shape.Layers)*p.Shape.BlockParams())
	assert.InEpsilon(t, ringTime((2*P-root)*2+P*2, 16, false, bw)+fullShardLatency(p, 16, 2), p.CommS, 1e-9)

	for _, tc := range []struct {
		v    any
		want string
	}{
		{filepath.Join(fixtures, "missing.txt"), "backend_options.nccl_tests"},
		{[]any{}, "must name 1 to 16 files, got 0"},
		{[]any{3}, "item 1 must be a non-empty path"},
		{7, "must be a path or a list of paths"},
	} {
		_, err := ParseOptions(map[string]any{"nccl_tests": tc.v})
		require.Error(t, err, "%v", tc.v)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err = ParseOptions(map[string]any{"inter_node_fabric": "ib"})
	assert.ErrorContains(t, err, "must be one of ib-rail-8x200g, ib-rail-8x400g")
	_, err = ParseOptions(map[string]any{"inter_node_fabric": "tcp", "inter_node_bus_bw_gbps": 3})
	assert.ErrorContains(t, err, "both set the bandwidth between nodes: keep one")
	_, err = ParseOptions(map[string]any{"nccl_tests": files[1], "intra_node_bus_bw_gbps": 400})
	assert.ErrorContains(t, err, "both set the bandwidth inside a node: keep one")
	// A flat figure for one scope and a curve for the other is fine.
	_, err = ParseOptions(map[string]any{"inter_node_fabric": "tcp", "intra_node_bus_bw_gbps": 400})
	assert.NoError(t, err)
}

func TestPredictWith(t *testing.T) {
	rc := cfg("llama-1b", 16, sweeps.FullShard)
	rc.Nodes, rc.GPUsPerNode = 2, 8
	extra := map[string]any{"inter_node_fabric": "tcp"}
	// A sim run: the extra options join its own.
	rc.BackendOptions = map[string]any{"efficiency": 0.3}
	p, err := PredictWith(rc, extra)
	require.NoError(t, err)
	assert.Equal(t, 0.3, p.Hardware.Efficiency)
	assert.Equal(t, mustPredict(t, withOpts(rc, "efficiency", 0.3, "inter_node_fabric", "tcp")).StepTimeS, p.StepTimeS)
	assert.Equal(t, map[string]any{"efficiency": 0.3}, rc.BackendOptions, "the run's options are not modified")
	// Another backend's run: its options are not the sim's; the extra ones apply.
	rc.Backend, rc.BackendOptions = "torchrun", map[string]any{"script": "train.py"}
	q, err := PredictWith(rc, extra)
	require.NoError(t, err)
	plain := mustPredict(t, rc)
	assert.Greater(t, q.StepTimeS, plain.StepTimeS, "TCP is slower than the profile's 25 GB/s")
	_, err = PredictWith(rc, map[string]any{"nccl_tests": "missing.txt"})
	assert.ErrorContains(t, err, "backend_options.nccl_tests")
}
