package results

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// FuzzParseRule: any text given as --rule either is refused or reads as a rule with
// a finite limit that can decide (a drop below 100%), which String writes back.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"tokens_per_s_per_rank:-5%", "mfu>=0.35", "peak_mem_reserved_bytes<=8e10", "a:+%", ":",
		"tokens_per_s_per_rank:-NaN%", "mfu>=NaN", "mfu>=-Inf", "peak_mem_reserved_bytes:+Inf%", "tokens_per_s_per_rank:-100%",
		"mfu<=35", "step_time_s.median:+0x1p-2%", "tokens_per_s_per_rank:--5%", "loss_last<=-1e308", "mfu>=0.3<=0.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			assert.Less(t, len(err.Error()), 4000, "an error does not echo the input whole")
			return
		}
		require.False(t, math.IsNaN(r.Limit) || math.IsInf(r.Limit, 0), "%q: limit %v", s, r.Limit)
		if r.relative() {
			require.GreaterOrEqual(t, r.Limit, 0.0)
			if r.Kind == RuleDrop {
				require.Less(t, r.Limit, 1.0, "%q: a drop of 100%% or more never fails", s)
			}
		}
		back, err := ParseRule(r.String())
		require.NoError(t, err, "%q parsed as %s, which does not read back", s, r)
		assert.Equal(t, r.Metric, back.Metric)
		assert.Equal(t, r.Kind, back.Kind)
	})
}

// FuzzParseRulesFile: a rules file is refused with a *sweeps.SpecError (file:line:col)
// or gives rules that each pass ParseRule's checks; nothing panics.
func FuzzParseRulesFile(f *testing.F) {
	for _, s := range []string{
		"rules:\n  - tokens_per_s_per_rank:-5%\n  - mfu>=0.35\n",
		"rules: [mfu>=.nan]\n",
		"rules: [tokens_per_s_per_rank:-NaN%]\n",
		"rules:\n  - &a tokens_per_s_per_rank:-5%\n  - *a\n",
		"rules: [1, 2.5, true, null]\n",
		"rules: {a: b}\n",
		"rule:\n  - mfu>=0.3\n",
		"rules: []\n",
		"\ufeffrules: [mfu>=0.3]\n",
		"rules: [[[[mfu>=0.3]]]]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, err := ParseRulesFile("rules.yaml", data)
		if err != nil {
			var se *sweeps.SpecError
			var ses sweeps.SpecErrors
			require.True(t, errors.As(err, &se) || errors.As(err, &ses), "%T: %v", err, err)
			return
		}
		require.NotEmpty(t, rules)
		for _, r := range rules {
			require.False(t, math.IsNaN(r.Limit) || math.IsInf(r.Limit, 0))
			_, err := LookupColumn(r.Metric, KindMetric, KindDerived)
			require.NoError(t, err)
		}
	})
}
