package sampler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

func TestDevices(t *testing.T) {
	src := &fakeSource{n: 3}
	assert.Nil(t, Devices(nil, []int{0}, "h100-sxm"), "no source, nothing to sample")
	assert.Equal(t, []int{2}, Devices(src, []int{2}, "cpu"), "assigned devices are sampled whatever the hardware")
	assert.Equal(t, []int{0, 1, 2}, Devices(src, nil, "h100-sxm"))
	assert.Equal(t, []int{0, 1, 2}, Devices(src, nil, "auto"))
	assert.Nil(t, Devices(src, nil, "cpu"))
}

func report() Report {
	return Report{
		Samples:      []Sample{{Device: 0, Reading: Reading{MemUsedBytes: results.I64(7)}}, {Device: 1, Reading: Reading{MemUsedBytes: results.I64(9)}}},
		PeakMemBytes: map[int]int64{0: 7, 1: 9},
		Info:         DeviceInfo{Name: "GPU", Driver: "550", CUDA: "12.4"},
	}
}

func TestApply(t *testing.T) {
	r := report()
	var res results.Result
	require.True(t, r.Apply(&res, 2))
	require.NotNil(t, res.PeakDeviceMemBytes)
	assert.Equal(t, int64(9), *res.PeakDeviceMemBytes)
	assert.Equal(t, results.Env{GPU: "GPU", Driver: "550", CUDA: "12.4"}, res.Env)
	for _, s := range r.Samples {
		assert.Equal(t, 2, s.Repeat)
	}

	res = results.Result{PeakDeviceMemBytes: results.I64(1), Env: results.Env{GPU: "torch's name"}}
	require.True(t, report().Apply(&res, 0))
	assert.Equal(t, int64(1), *res.PeakDeviceMemBytes, "the backend's own peak stands")
	assert.Equal(t, "torch's name", res.Env.GPU)
	assert.Equal(t, "12.4", res.Env.CUDA)

	res = results.Result{PerRank: []results.RankResult{{PeakDeviceMemBytes: results.I64(3)}}}
	require.True(t, report().Apply(&res, 0))
	assert.Nil(t, res.PeakDeviceMemBytes, "a rank's peak is the backend's measurement too")

	for name, res := range map[string]results.Result{
		"predicted": {Predicted: true},
		"cpu":       {Env: results.Env{Hardware: "cpu"}},
	} {
		assert.False(t, report().Apply(&res, 0), name)
		assert.Nil(t, res.PeakDeviceMemBytes, name)
		assert.Empty(t, res.Env.GPU, name)
	}
	res = results.Result{}
	assert.False(t, Report{}.Apply(&res, 0), "nothing sampled")
	assert.Equal(t, results.Result{}, res)
}
