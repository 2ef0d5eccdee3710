package sim

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseCalibration feeds calibration files: parsing never panics, and a
// file it accepts has every constant within bounds and survives being written
// and read again unchanged.
func FuzzParseCalibration(f *testing.F) {
	for _, seed := range []string{
		`{"version":1,"profiles":{"h100-sxm":{"efficiency":0.4,"efficiency_size_exponent":0.1,"intra_node_bw_factor":0.8,"forward_overlap":0.6,"mem_factors":{"activations":1.2,"grads":0.9},"reserved_factor":1.05,"overhead_bytes":1000,"step_overhead_s":0.01,"collective_latency_s":1e-5,"fit":{"runs":3,"leave_one_out":[{"run":"a","mem_err":0.01}]}}}}`,
		`{"version":1,"profiles":{"cpu":{"efficiency":1e-3,"fit":{}}}}`,
		`{"version":1,"profiles":{"cpu":{"efficiency":0.1,"mem_factors":{"x":1},"fit":{}}}}`,
		`{"version":2}`,
		`[]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCalibration(data)
		if err != nil {
			return
		}
		for name, k := range c.Profiles {
			require.NoError(t, k.check(), name)
			require.GreaterOrEqual(t, k.efficiencyFor(1), minEfficiency)
			require.LessOrEqual(t, k.efficiencyFor(1<<50), 1.0)
		}
		b, err := json.Marshal(c)
		require.NoError(t, err)
		again, err := ParseCalibration(b)
		require.NoError(t, err, "%s", b)
		b2, err := json.Marshal(again)
		require.NoError(t, err)
		require.JSONEq(t, string(b), string(b2))
	})
}
