package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/harness/launch"
)

// BenchmarkRunOverhead measures what the harness adds per run with an instant
// backend: run_args.json, logs, steps.csv, ranks, metrics.json and the manifest
// rewrite. Resumed measures a sweep whose runs are all done (the skip check).
func BenchmarkRunOverhead(b *testing.B) {
	const runs = 64
	for _, resumed := range []bool{false, true} {
		b.Run(fmt.Sprintf("resumed=%v", resumed), func(b *testing.B) {
			reg := &backends.Registry{}
			require.NoError(b, reg.Register(&fake{name: "fake"}))
			opts := Options{ResultsDir: b.TempDir(), Registry: reg, Progress: ProgressNone,
				Devices: launch.NewLocal(0), Now: time.Now}
			p := plan("bench", runs)
			if resumed {
				_, err := Run(context.Background(), p, opts)
				require.NoError(b, err)
			} else {
				opts.Rerun = true
			}
			b.ResetTimer()
			for b.Loop() {
				sum, err := Run(context.Background(), p, opts)
				require.NoError(b, err)
				require.Equal(b, runs, sum.OK)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*runs), "µs/run")
		})
	}
}
