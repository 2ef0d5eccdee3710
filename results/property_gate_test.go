package results

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/aclements/go-moremath/stats"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Properties of the two gates (issue 37): a results directory gated against a
// byte copy of itself passes; an A/A ab never fails, and on the sim (identical
// figures) passes. Each generates result sets across statuses, repeats, figures
// measured or not, noise and machine states; rapid shrinks a failure to the
// smallest set that breaks the property and prints it.

// pgStatuses are the statuses a generated repeat can end with, ok most often.
var pgStatuses = []Status{StatusOK, StatusOK, StatusOK, StatusOK, StatusOOM, StatusInfeasible, StatusDiverged, StatusFailed, StatusTimeout, StatusCanceled}

// pgFigures says which figures a generated run's backend measures: the sim and
// a GPU trainer measure device memory, gotrain on a CPU none; MFU needs the
// model's FLOPs and the device's peak.
type pgFigures struct{ memory, flops, machine bool }

func drawPGFigures(t *rapid.T) pgFigures {
	return pgFigures{memory: rapid.Bool().Draw(t, "measures memory"), flops: rapid.Bool().Draw(t, "knows FLOPs"),
		machine: rapid.Bool().Draw(t, "reads the machine")}
}

// pgConfig is the run config of generated point i (distinct IDs).
func pgConfig(i int) sweeps.RunConfig {
	rc := fixtureConfig([]int{1, 2, 4}[i%3], []string{sweeps.FullShard, sweeps.DDP}[i/3%2])
	rc.Sweep = "nightly"
	rc.BatchPerDevice = 1 + i/6
	rc.GlobalBatch = rc.BatchPerDevice * rc.WorldSize
	rc.AssignID()
	return rc
}

// pgRepeat is one repeat of rc as a backend reports it: steps of stepTime,
// reserved bytes of memory at the peak, what the machine was doing (other:
// other processes' CPU share, <0 unknown).
func pgRepeat(rc sweeps.RunConfig, st Status, stepTime float64, steps int, reserved int64, f pgFigures, other float64) Result {
	res := Result{Status: st, WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode, TokensPerStep: rc.TokensPerStep()}
	if f.flops {
		res.ModelFlopsPerToken, res.PeakFlopsPerS = 1.2e9, 989e12
	}
	if f.machine && other >= 0 {
		res.Env.Machine = &Machine{Repeats: 1, CPUs: 2, OtherCPUShare: F64(other)}
	}
	if f.memory && (st == StatusOK || st == StatusOOM) {
		res.PeakMemReservedBytes, res.PeakMemAllocatedBytes = I64(reserved), I64(reserved*9/10)
	}
	if st != StatusOK {
		res.Error = "generated " + string(st)
		return res
	}
	for s := range steps {
		loss := 4.0 - 0.1*float64(s)
		res.Steps = append(res.Steps, Step{Step: 1 + s, Loss: &loss, StepTimeS: stepTime, Tokens: rc.TokensPerStep()})
		res.MeasuredWallS += stepTime
	}
	return res
}

// pgRelativeRules are the relative rules a property may add to the defaults:
// on figures measured per repeat (which ab.json pairs), and for the nightly
// gate a derived one too.
var pgRelativeRules = []string{"tokens_per_s_per_rank:-5%", "tokens_per_s:-1%", "step_time_s.median:+2%", "mfu:-5%",
	"peak_mem_reserved_bytes:+0%", "peak_mem_allocated_bytes:+3%", "tflops_per_rank:-10%"}

// drawPGRules draws the rules of a gate from texts: none (the defaults) or some.
func drawPGRules(t *rapid.T, texts []string) []Rule {
	texts = rapid.SliceOfNDistinct(rapid.SampledFrom(texts), 0, 4, rapid.ID[string]).Draw(t, "rules")
	if len(texts) == 0 {
		return nil
	}
	rules, err := ParseRules(texts, "--rule")
	if err != nil {
		t.Fatalf("rules %v: %v", texts, err)
	}
	return rules
}

// TestPropertyGateAgainstByteCopyPasses: a results directory gated against a
// byte copy of itself passes. Its first counterexample, before identical
// per-repeat figures passed (judgeFigures, sameSamples): one run, ws1
// full_shard, 6 ok repeats 30% apart, the default rules: "tokens_per_s_per_rank
// :-5%: +0.0%, too noisy to tell against the -5% limit: the medians' 95% CIs
// (± 13%, ± 13%) allow -12% to +13% (p=1.000 n=6+6)", inconclusive against
// itself.
//
// In full: a results directory gated against a
// byte copy of itself never fails or is inconclusive on a figure: every figure
// equals itself, however noisy its repeats and whatever the machine did. The
// gate passes whenever the set is one a gate can pass on its own (README's
// "What passed guarantees": every run finished with a result and one is ok; an
// explicit rule's figure is known somewhere); otherwise it fails only for those
// reasons (a run that did not finish, nothing ok, a rule that decided nothing).
func TestPropertyGateAgainstByteCopyPasses(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := drawPGFigures(t)
		n := rapid.IntRange(1, 3).Draw(t, "runs")
		var runs []Run
		for i := range n {
			rc := pgConfig(i)
			// Few repeats, or enough for an interval (6 or more).
			repeats := rapid.SampledFrom([]int{1, 2, 6}).Draw(t, fmt.Sprintf("run %d repeats", i))
			spread := rapid.SampledFrom([]float64{0, 0.02, 0.3, 2}).Draw(t, fmt.Sprintf("run %d spread", i))
			allOK := rapid.Bool().Draw(t, fmt.Sprintf("run %d all ok", i))
			var reps []Result
			for r := range repeats {
				label := fmt.Sprintf("run %d repeat %d", i, r)
				st := StatusOK
				if !allOK {
					st = rapid.SampledFrom(pgStatuses).Draw(t, label+" status")
				}
				noise := rapid.Float64Range(0, 1).Draw(t, label+" noise")
				other := rapid.Float64Range(-0.2, 0.9).Draw(t, label+" other CPU")
				reps = append(reps, pgRepeat(rc, st, 0.1*(1+spread*noise), rapid.IntRange(1, 4).Draw(t, label+" steps"),
					int64(8<<30)+int64(noise*spread*float64(1<<30)), f, other))
			}
			runs = append(runs, Run{Config: rc, Metrics: Normalize(rc, reps)})
		}
		rules := drawPGRules(t, append(slices.Clone(pgRelativeRules), "scaling_efficiency:-5%", "memory_saving:-1%"))

		dir, err := os.MkdirTemp("", "gate-copy")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		orig := filepath.Join(dir, "night")
		sd, err := OpenSweep(orig)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if err := sd.WriteRunArgs(r.Config); err != nil {
				t.Fatal(err)
			}
			if err := sd.WriteMetrics(r.Config.ID, r.Metrics); err != nil {
				t.Fatal(err)
			}
		}
		cp := filepath.Join(dir, "copy")
		if err := os.CopyFS(cp, os.DirFS(orig)); err != nil {
			t.Fatal(err)
		}
		base, err := LoadPath(orig)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := LoadPath(cp)
		if err != nil {
			t.Fatal(err)
		}
		g, err := Gate(base, cur, GateOptions{Rules: rules, BaselineName: orig, CurrentName: cp})
		if err != nil {
			t.Fatal(err)
		}

		for _, c := range g.Checks {
			switch {
			case c.Outcome == OutcomeInconclusive:
				t.Fatalf("%s %s: inconclusive against itself: %s", c.Run, c.Rule, c.Reason)
			case c.Outcome == OutcomeFail && !strings.HasPrefix(c.Reason, "did not finish"):
				t.Fatalf("%s %s: failed against itself: %s", c.Run, c.Rule, c.Reason)
			}
		}
		finished, ok := true, false
		for _, r := range cur {
			finished = finished && r.Metrics.Status.Final()
			ok = ok || r.Metrics.Status == StatusOK
		}
		// Every explicit rule's figure is known and not 0 in an ok run: a
		// relative change needs a baseline figure to divide by (a memory_saving
		// of 0 has none), and a gate with no figure compared fails.
		known := true
		for _, rule := range rules {
			col, _ := LookupColumn(rule.Metric, KindMetric, KindDerived)
			k := false
			for i := range cur {
				if v := col.Value(&cur[i]); cur[i].Metrics.Status == StatusOK && v != nil && v != 0.0 && v != int64(0) {
					k = true
				}
			}
			known = known && k
		}
		if finished && ok && known {
			if g.Verdict != OutcomePass {
				t.Fatalf("gated against its byte copy: %s, want pass (problems %q)", g.Verdict, g.Problems)
			}
			return
		}
		if g.Verdict != OutcomeFail {
			t.Fatalf("a set with an unfinished run, no ok run or a rule on an unknown figure: %s, want fail", g.Verdict)
		}
	})
}

// pgABPoint measures point i of an A/A: per repeat, A's and B's figures from
// draw (A's repeat, then B's), statuses all ok.
func pgABPoint(i, pairs int, f pgFigures, conf float64, draw func(side string, pair int) (stepTime float64, reserved int64, other float64)) ABPoint {
	rc := pgConfig(i)
	var ra, rb []Result
	for p := range pairs {
		st, mem, other := draw("a", p)
		ra = append(ra, pgRepeat(rc, StatusOK, st, 3, mem, f, other))
		st, mem, other = draw("b", p)
		rb = append(rb, pgRepeat(rc, StatusOK, st, 3, mem, f, other))
	}
	rcB := rc
	rcB.ID += "-b"
	a := &Run{Config: rc, Metrics: Normalize(rc, ra)}
	b := &Run{Config: rcB, Metrics: Normalize(rcB, rb)}
	return ABPointOf(a, b, conf)
}

// drawABShape draws what an ab command line allows: a confidence level, and
// at least the pairs it needs (and ab's minimum, 6).
func drawABShape(t *rapid.T) (conf float64, pairs int) {
	conf = rapid.SampledFrom([]float64{0.95, 0.99, 0.9, MinABConfidence, MaxABConfidence}).Draw(t, "confidence")
	lo := max(MinStatRepeats, MinPairs(conf))
	return conf, rapid.IntRange(lo, lo+12).Draw(t, "pairs")
}

// gateABFile writes r as ab.json, reads it back as gate --ab does, and gates it.
func gateABFile(t *rapid.T, r ABResult, rules []Rule, policy string) *ABGateReport {
	dir, err := os.MkdirTemp("", "ab-aa")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := WriteAB(dir, r); err != nil {
		t.Fatal(err)
	}
	back, err := ReadAB(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := GateAB(back, rules, policy)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestPropertyABAAOnTheSimPasses: an A/A on the sim passes. With issue 37
// item 5's fix reverted (ab.json without per-repeat memory, a missing figure
// inconclusive) rapid's smallest counterexample is the report: one
// point, 6 pairs at 95%, identical figures, the default rules: "INCONCLUSIVE:
// 3 checks, none failed, 2 inconclusive ... peak_mem_reserved_bytes:+3%:
// inconclusive: no per-repeat peak_mem_reserved_bytes on both sides". With only
// the recording reverted: memory measured, rule peak_mem_reserved_bytes:+0%,
// "cannot be checked: no point of the A/B result has per-repeat
// peak_mem_reserved_bytes".
//
// In full: an A/A on the sim, whose figures are the
// same on both sides repeat by repeat (they may differ between repeats), passes
// gate --ab with the default rules and any relative rules on figures the runs
// measured, under every inconclusive policy. Every rule on a figure the runs
// measured is decided, not skipped (ab.json records it: memory included); a
// default rule on a figure they did not measure (a backend without device
// memory) is skipped with its reason, never inconclusive.
func TestPropertyABAAOnTheSimPasses(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := drawPGFigures(t)
		conf, pairs := drawABShape(t)
		points := rapid.IntRange(1, 3).Draw(t, "points")
		var figs [][]float64
		for p := range pairs {
			figs = append(figs, []float64{
				rapid.Float64Range(0.01, 1).Draw(t, fmt.Sprintf("pair %d step time", p)),
				float64(rapid.Int64Range(1<<20, 80<<30).Draw(t, fmt.Sprintf("pair %d reserved", p))),
				rapid.Float64Range(-0.1, 0.9).Draw(t, fmt.Sprintf("pair %d other CPU", p)),
			})
		}
		r := ABResult{Sweep: "aa-ab", Order: "abba", A: []string{"x=1"}, B: []string{"x=1"}, Confidence: conf}
		for i := range points {
			r.Points = append(r.Points, pgABPoint(i, pairs, f, conf, func(_ string, p int) (float64, int64, float64) {
				return figs[p][0], int64(figs[p][1]), figs[p][2]
			}))
		}
		rules := drawPGRules(t, pgRelativeRules)
		if rules == nil {
			// Without memory measured, the default memory rules are skipped.
			rules, _ = ParseRules(DefaultRules, "default")
		} else {
			// A rule given on a figure the runs did not measure is a usage
			// error (TestGateABSkipsUnmeasuredFigures), not a verdict.
			rules = slices.DeleteFunc(rules, func(r Rule) bool {
				return (!f.memory && strings.HasPrefix(r.Metric, "peak_mem")) || (!f.flops && (r.Metric == "mfu" || r.Metric == "tflops_per_rank"))
			})
			if len(rules) == 0 {
				return
			}
		}
		policy := rapid.SampledFrom(InconclusivePolicies).Draw(t, "policy")
		g := gateABFile(t, r, rules, policy)
		if g.Verdict != OutcomePass || g.Failures+g.Inconclusive > 0 {
			var why []string
			for _, c := range g.Checks {
				if c.Outcome != OutcomePass {
					why = append(why, fmt.Sprintf("%s %s: %s: %s", c.Point, c.Rule, c.Outcome, c.Why))
				}
			}
			t.Fatalf("A/A on the sim: %s (%s); %s", g.Verdict, g.Headline(), strings.Join(why, "; "))
		}
		for _, c := range g.Checks {
			if c.Outcome == OutcomeSkip {
				t.Fatalf("%s %s: skipped although the runs measured the figure: %s", c.Point, c.Rule, c.Why)
			}
		}
		for _, s := range g.Skipped {
			measured := !strings.HasPrefix(s.Rule, "peak_mem") || f.memory
			if measured {
				t.Fatalf("rule %s skipped although the runs measured its figure: %s", s.Rule, s.Why)
			}
		}
	})
}

// pgNoise draws one repeat's factor from a noise family: every side, every
// pair from the same distribution (A/A), so nothing tells B from A.
type pgNoise struct {
	family string  // normal, lognormal, uniform, disturbed (mostly quiet, sometimes 2-5x slower)
	spread float64 // scale of the noise
	drift  float64 // amplitude of a drift both sides of a pair share (a busy minute)
}

func (n pgNoise) factor(rng *rand.Rand) float64 {
	switch n.family {
	case "normal":
		return math.Max(0.05, 1+n.spread*rng.NormFloat64())
	case "lognormal":
		return math.Exp(n.spread * rng.NormFloat64())
	case "uniform":
		return 1 + n.spread*(2*rng.Float64()-1)
	}
	if rng.Float64() < 0.1 {
		return 2 + 3*rng.Float64()
	}
	return 1 + n.spread*rng.Float64()
}

// TestPropertyABAANeverFails: an A/A under noise (A and B, pair by pair, drawn
// from one distribution; with a drift both sides of a pair share; with machine
// states drawn alike for both sides) never fails beyond what its interval
// allows. A failure needs the whole interval beyond the limit; for identical
// distributions the pairs' median change is 0, so that happens at most (1 −
// confidence)/2 of the time, and less the larger the limit. Each case runs 100
// A/As from a seed and requires the failures to stay within that rate's
// binomial bound at one in a billion; where no pair can move by the limit
// (bounded noise narrower than it) none may fail at all.
func TestPropertyABAANeverFails(t *testing.T) {
	const trials = 100
	rapid.Check(t, func(t *rapid.T) {
		conf, pairs := drawABShape(t)
		noise := pgNoise{
			family: rapid.SampledFrom([]string{"normal", "lognormal", "uniform", "disturbed"}).Draw(t, "family"),
			spread: rapid.SampledFrom([]float64{0, 0.005, 0.03, 0.2, 0.6}).Draw(t, "spread"),
			drift:  rapid.SampledFrom([]float64{0, 0.5, 3}).Draw(t, "drift"),
		}
		if noise.family == "uniform" {
			noise.spread = math.Min(noise.spread, 0.5)
		}
		rule := rapid.SampledFrom([]string{"tokens_per_s_per_rank:-1%", "tokens_per_s_per_rank:-5%", "step_time_s.median:+2%",
			"tokens_per_s_per_rank:+5%", "peak_mem_reserved_bytes:+1%", "peak_mem_reserved_bytes:-10%"}).Draw(t, "rule")
		rules, err := ParseRules([]string{rule}, "--rule")
		if err != nil {
			t.Fatal(err)
		}
		machines := rapid.Bool().Draw(t, "machine states")
		seed := rapid.Uint64().Draw(t, "seed")
		rng := rand.New(rand.NewPCG(seed, 37))
		f := pgFigures{memory: true, flops: true, machine: machines}
		fails := 0
		for range trials {
			drift := make([]float64, pairs)
			for p := range drift {
				drift[p] = 1 + noise.drift*rng.Float64()
			}
			r := ABResult{Sweep: "aa-ab", Order: "abba", A: []string{"x=1"}, B: []string{"x=1"}, Confidence: conf}
			r.Points = append(r.Points, pgABPoint(0, pairs, f, conf, func(_ string, p int) (float64, int64, float64) {
				return 0.1 * drift[p] * noise.factor(rng), int64(float64(8<<30) * noise.factor(rng)), rng.Float64() * 0.9
			}))
			g, err := GateAB(r, rules, "")
			if err != nil {
				t.Fatal(err)
			}
			if g.Verdict == OutcomeFail {
				fails++
			}
		}
		// Bounded noise narrower than the limit: no pair's change reaches it.
		if noise.family == "uniform" && (1+noise.spread)/(1-noise.spread)-1 < rules[0].Limit && fails > 0 {
			t.Fatalf("%d of %d A/As failed %s, though no pair can change by the limit (noise ±%g)", fails, trials, rule, noise.spread)
		}
		tail := (1 - conf) / 2
		bound := stats.BinomialDist{N: trials, P: tail}
		limit := 0
		for limit < trials && 1-bound.CDF(float64(limit)) > 1e-9 {
			limit++
		}
		if fails > limit {
			t.Fatalf("%d of %d A/As failed %s at %g%% confidence: more than a rate of %g allows (%d)", fails, trials, rule, 100*conf, tail, limit)
		}
	})
}
