package results

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Issue 29's noisy nights, as per-repeat tokens/s/rank: two sweeps of identical
// code on a loaded machine, where all six repeats of one run fell inside the same
// disturbed minute.
var (
	noisyDDPBase = []float64{24074, 26000, 34500, 35280, 36000, 38000} // 34890 ± 31%
	noisyDDPCur  = []float64{3000, 5000, 7000, 7492, 9000, 27100}      // 7246 ± 274%
	noisyFSBase  = []float64{16474, 19000, 20500, 21206, 22500, 24000} // 20853 ± 21%
	noisyFSCur   = []float64{4000, 6000, 9000, 10636, 22000, 23072}    // 9818 ± 135%
)

func mustRule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	require.NoError(t, err)
	return r
}

// scaled returns xs × f.
func scaled(xs []float64, f float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * f
	}
	return out
}

var tight = []float64{1000, 1004, 998, 1002, 1001, 999}

// TestJudgeSamples is the gate's verdict on hand-made samples: a wide spread is
// inconclusive (it failed and passed at random before), a clear slowdown with
// tight samples fails, identical tight samples pass, and a slowdown measured under
// a materially different machine state is inconclusive.
func TestJudgeSamples(t *testing.T) {
	drop := mustRule(t, "tokens_per_s_per_rank:-5%")
	quiet := &Machine{CPUs: 2, OtherCPUShare: F64(0.02), Load1: F64(1)}
	hog := &Machine{CPUs: 2, OtherCPUShare: F64(0.35), Load1: F64(2)}

	tests := []struct {
		name       string
		rule       Rule
		base, cur  []float64
		bm, cm     *Machine
		want       Outcome
		wantReason string
	}{
		{"issue's ddp: was FAIL on noise", drop, noisyDDPBase, noisyDDPCur, nil, nil, OutcomeInconclusive,
			"-79.2%, too noisy to tell against the -5% limit: the medians' 95% CIs (± 31%, ± 274%) allow -92% to +13% (p=0.009 n=6+6)"},
		{"issue's full_shard: was pass on noise", drop, noisyFSBase, noisyFSCur, nil, nil, OutcomeInconclusive, "too noisy to tell"},
		{"clear slowdown, tight", drop, tight, scaled(tight, 0.5), quiet, quiet, OutcomeFail,
			"-50.0%, beyond the -5% limit (p=0.002 n=6+6)"},
		{"identical, tight", drop, tight, scaled(tight, 1.001), quiet, quiet, OutcomePass, "+0.1%, within the -5% limit (p="},
		{"faster is no drop", drop, tight, scaled(tight, 1.5), nil, nil, OutcomePass, "within"},
		{"slowdown under a hog", drop, tight, scaled(tight, 0.5), quiet, hog, OutcomeInconclusive,
			"-50.0%, beyond the -5% limit, but measured on a busier machine now, which could explain it: other processes used 2% of the CPU in the baseline, 35% now, leaving 34% less of it free now"},
		{"identical under a hog: the hog could only have hurt", drop, tight, tight, quiet, hog, OutcomePass,
			"+0.0%, within the -5% limit (p=1.000 n=6+6), even on a busier machine now (other processes used 2% of the CPU in the baseline, 35% now, leaving 34% less of it free now)"},
		{"identical, the baseline under a hog: a quieter machine could hide a drop", drop, tight, tight, hog, quiet, OutcomeInconclusive,
			"+0.0%, within the -5% limit, but measured on a quieter machine now, which could hide a regression"},
		{"slowdown on a quieter machine: the machine only helped", drop, tight, scaled(tight, 0.5), hog, quiet, OutcomeFail,
			"-50.0%, beyond the -5% limit (p=0.002 n=6+6), even on a quieter machine now"},
		{"step time, busier machine now: a rise it could explain", mustRule(t, "step_time_s.median:+3%"), tight, scaled(tight, 1.5), quiet, hog,
			OutcomeInconclusive, "busier machine now, which could explain it"},
		{"states that differ both ways", drop, tight, scaled(tight, 0.5), &Machine{CPUs: 2, OtherCPUShare: F64(0.02), CPUMHz: F64(2000)},
			&Machine{CPUs: 2, OtherCPUShare: F64(0.35), CPUMHz: F64(3000)}, OutcomeInconclusive,
			"-50.0%, measured under machine states that differ both ways, which could explain any change: other processes used 2% of the CPU in the baseline, 35% now, leaving 34% less of it free now; CPU clock 2000 MHz in the baseline, 3000 MHz now"},
		{"noisy and different", drop, noisyFSBase, noisyFSCur, quiet, hog, OutcomeInconclusive,
			"too noisy to tell against the -5% limit: the medians' 95% CIs (± 21%, ± 135%) allow -83% to +40% (p=0.180 n=6+6); and measured under different machine states"},
		{"memory does not care about the CPU's load", mustRule(t, "peak_mem_reserved_bytes:+3%"), tight, scaled(tight, 1.5), quiet, hog,
			OutcomeFail, "+50.0%, beyond the +3% limit"},
		{"a rise rule, resolved", mustRule(t, "step_time_s.median:+3%"), tight, scaled(tight, 1.2), nil, nil, OutcomeFail, "+20.0%, beyond the +3% limit"},
		{"few repeats: the threshold alone", drop, []float64{1000, 1010}, []float64{900, 910}, nil, nil, OutcomeFail, "(not statistically backed)"},
		{"one side unknown to the machine: no verdict from it", drop, tight, scaled(tight, 0.5), nil, hog, OutcomeFail, "beyond"},
		{"the baseline's spread reaches 0", drop, []float64{0, 0, 1, 1000, 1000, 1000}, tight, nil, nil, OutcomeInconclusive, "reaches 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, why, d, err := JudgeSamples(tt.rule, tt.base, tt.cur, tt.bm, tt.cm, 0)
			require.NoError(t, err)
			assert.Equal(t, tt.want, o, why)
			assert.Contains(t, why, tt.wantReason)
			assert.NotNil(t, d.Change)
		})
	}

	_, _, _, err := JudgeSamples(mustRule(t, "mfu>=0.3"), tight, tight, nil, nil, 0)
	assert.ErrorContains(t, err, "only a relative rule")
	_, _, _, err = JudgeSamples(drop, nil, tight, nil, nil, 0)
	assert.ErrorContains(t, err, "at least one sample")
}

// sampledRun is a ws1 gotrain run whose repeats measured tokens/s/rank xs, under
// machine state m (nil: not read).
func sampledRun(sharding string, xs []float64, m *Machine) Run {
	rc := fixtureConfig(1, sharding)
	rc.Sweep, rc.Repeats = "noisy", len(xs)
	rc.AssignID()
	var reps []Result
	for _, x := range xs {
		r := fixtureResult(rc)
		r.MeasuredWallS = float64(r.TokensPerStep*int64(len(r.Steps))) / x
		r.PerRank = nil
		if m != nil {
			c := *m
			r.Env.Machine = &c
		}
		reps = append(reps, r)
	}
	return Run{Config: rc, Metrics: Normalize(rc, reps)}
}

// TestGateInconclusive: the gate's verdict and report when checks are
// inconclusive, under each policy; a gate still never passes on missing data.
func TestGateInconclusive(t *testing.T) {
	base := []Run{sampledRun(sweeps.DDP, noisyDDPBase, nil), sampledRun(sweeps.FullShard, noisyFSBase, nil)}
	cur := []Run{sampledRun(sweeps.DDP, noisyDDPCur, nil), sampledRun(sweeps.FullShard, noisyFSCur, nil)}
	rules := []Rule{mustRule(t, "tokens_per_s_per_rank:-5%")}
	gate := func(policy string, base, cur []Run) *GateReport {
		g, err := Gate(base, cur, GateOptions{Rules: rules, Now: gateTime, Inconclusive: policy, BaselineName: "night1", CurrentName: "night2"})
		require.NoError(t, err)
		return g
	}

	g := gate("", base, cur)
	assert.Equal(t, OutcomeInconclusive, g.Verdict)
	assert.False(t, g.Passed)
	assert.Equal(t, 2, g.Inconclusive)
	assert.Zero(t, g.Failures)
	assert.Equal(t, InconclusiveReport, g.InconclusivePolicy)
	assert.Contains(t, g.Headline(), "gate INCONCLUSIVE: 2 of 2 checks could not tell")
	var buf bytes.Buffer
	require.NoError(t, g.Write(&buf, FormatTable))
	assert.Contains(t, buf.String(), "Inconclusive checks (neither pass nor fail):")
	assert.Contains(t, buf.String(), "inconclusive checks make the gate inconclusive (exit 3)")
	buf.Reset()
	require.NoError(t, g.Write(&buf, FormatJUnit))
	assert.Contains(t, buf.String(), `skipped="2"`)
	assert.Contains(t, buf.String(), `failures="0"`)

	g = gate(InconclusiveFail, base, cur)
	assert.Equal(t, OutcomeFail, g.Verdict)
	assert.Contains(t, g.Headline(), "2 inconclusive counted as failures (--inconclusive=fail)")
	buf.Reset()
	require.NoError(t, g.Write(&buf, FormatJUnit))
	assert.Contains(t, buf.String(), `failures="2"`)

	g = gate(InconclusivePass, base, cur)
	assert.Equal(t, OutcomePass, g.Verdict)
	assert.True(t, g.Passed)
	assert.Contains(t, g.Headline(), "2 inconclusive counted as passing (--inconclusive=pass)")

	// Missing data fails, whatever the policy for noise.
	g = gate(InconclusivePass, base, cur[:1])
	assert.Equal(t, OutcomeFail, g.Verdict, g.Headline())
	g = gate(InconclusivePass, base, nil)
	assert.Equal(t, OutcomeFail, g.Verdict, g.Headline())

	// Tight samples under materially different machine states: inconclusive, with
	// the states in the reason.
	q := &Machine{CPUs: 2, OtherCPUShare: F64(0.01)}
	h := &Machine{CPUs: 2, OtherCPUShare: F64(0.4)}
	g = gate("", []Run{sampledRun(sweeps.DDP, tight, q)}, []Run{sampledRun(sweeps.DDP, scaled(tight, 0.6), h)})
	require.Len(t, g.Checks, 1)
	assert.Equal(t, OutcomeInconclusive, g.Checks[0].Outcome)
	assert.Contains(t, g.Checks[0].Reason, "other processes used 1% of the CPU in the baseline, 40% now")
	// The same slowdown on the same quiet machine fails.
	g = gate("", []Run{sampledRun(sweeps.DDP, tight, q)}, []Run{sampledRun(sweeps.DDP, scaled(tight, 0.6), q)})
	assert.Equal(t, OutcomeFail, g.Verdict, g.Headline())

	_, err := Gate(base, cur, GateOptions{Rules: rules, Inconclusive: "maybe"})
	assert.ErrorContains(t, err, `inconclusive policy "maybe": use report, fail, pass`)
}

// TestGateBoundInconclusive: an absolute bound inside the median's CI cannot say
// which side of it the figure is on.
func TestGateBoundInconclusive(t *testing.T) {
	cur := []Run{sampledRun(sweeps.DDP, noisyFSBase, nil)}
	mid := *cur[0].Metrics.TokensPerSPerRank
	for _, tt := range []struct {
		rule string
		want Outcome
	}{
		{"tokens_per_s_per_rank>=20000", OutcomeInconclusive},
		{"tokens_per_s_per_rank>=10000", OutcomePass},
		{"tokens_per_s_per_rank>=30000", OutcomeFail},
	} {
		g, err := Gate(cur, cur, GateOptions{Rules: []Rule{mustRule(t, tt.rule)}, Now: gateTime})
		require.NoError(t, err)
		assert.Equal(t, tt.want, g.Checks[0].Outcome, "%s on a median of %g: %s", tt.rule, mid, g.Checks[0].Reason)
	}
}

// noisyExample is the README's noisy example (examples/gate-noisy): issue 29's two
// nights, night 2's ddp run measured while something else took 46% of the CPU.
func noisyExample(t *testing.T, dir string) {
	t.Helper()
	quiet := &Machine{CPUs: 2, Load1: F64(1.1), OtherCPUShare: F64(0.03)}
	busy := &Machine{CPUs: 2, Load1: F64(2.9), OtherCPUShare: F64(0.46)}
	mk := func(sharding string, xs []float64, m *Machine) Run {
		rc := fixtureConfig(1, sharding)
		rc.Sweep, rc.Repeats = "nightly", len(xs)
		rc.AssignID()
		var reps []Result
		for _, x := range xs {
			r := fixtureResult(rc)
			r.MeasuredWallS = float64(r.TokensPerStep*int64(len(r.Steps))) / x
			r.PerRank = nil
			c := *m
			r.Env.Machine = &c
			reps = append(reps, r)
		}
		return Run{Config: rc, Metrics: Normalize(rc, reps)}
	}
	writeTree(t, filepath.Join(dir, "night1"), []Run{mk(sweeps.DDP, noisyDDPBase, quiet), mk(sweeps.FullShard, noisyFSBase, quiet)})
	writeTree(t, filepath.Join(dir, "night2"), []Run{mk(sweeps.DDP, noisyDDPCur, busy), mk(sweeps.FullShard, noisyFSCur, quiet)})
}

// TestNoisyExampleFixture keeps examples/gate-noisy, which the README's gate
// section runs, what noisyExample writes (-update rewrites it).
func TestNoisyExampleFixture(t *testing.T) {
	want := filepath.Join("..", "examples", "gate-noisy")
	if *update {
		require.NoError(t, os.RemoveAll(want))
		noisyExample(t, want)
		// The index is a cache of this machine's file times: Load rebuilds it.
		for _, night := range []string{"night1", "night2"} {
			require.NoError(t, os.Remove(filepath.Join(want, night, "index.jsonl")))
		}
	}
	got := t.TempDir()
	noisyExample(t, got)
	n := 0
	require.NoError(t, filepath.WalkDir(got, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "index.jsonl" {
			return err
		}
		rel, _ := filepath.Rel(got, p)
		g, err := os.ReadFile(p)
		require.NoError(t, err)
		w, err := os.ReadFile(filepath.Join(want, rel))
		require.NoError(t, err, "run go test ./results -update")
		assert.Equal(t, string(w), string(g), "%s differs; run go test ./results -update", rel)
		n++
		return nil
	}))
	assert.GreaterOrEqual(t, n, 4)
}
