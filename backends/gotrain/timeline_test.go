package gotrain

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// chromeTrace is what the tests read back of timeline.json.
type chromeTrace struct {
	TraceEvents []struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Ph   string         `json:"ph"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	OtherData       map[string]any `json:"otherData"`
}

// readTrace parses a timeline as Chrome Trace Event JSON, after checking that
// report --timeline would offer it (results.CheckTimeline).
func readTrace(t *testing.T, path string) chromeTrace {
	t.Helper()
	_, err := results.CheckTimeline(path)
	require.NoError(t, err, "report --timeline offers what gotrain writes")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var tr chromeTrace
	require.NoError(t, json.Unmarshal(data, &tr), "timeline.json is JSON")
	return tr
}

// TestStepBreakdownAndTimeline runs gotrain at world size 2 and 4 over shared
// memory, full_shard without prefetch and with forward and backward_pre
// prefetch (the verification): every rank reports a consistent
// breakdown of its median measured step, and the run's timeline.json parses
// as Chrome Trace Event JSON with one process per rank, its threads named,
// and complete events of the measured steps only. Without prefetch no
// all-gather overlaps computation on any rank, so exposed communication is
// all of the collectives' time; with prefetch some all-gather runs during a
// computation. The figures are logged (the machine's load moves them).
func TestStepBreakdownAndTimeline(t *testing.T) {
	for _, ws := range []int{2, 4} {
		for _, prefetch := range []bool{false, true} {
			name := fmt.Sprintf("ws%d/none", ws)
			rc := tinyRun(ws, 1, sweeps.FullShard)
			rc.BackwardPrefetch, rc.ForwardPrefetch = sweeps.PrefetchNone, false
			if prefetch {
				name = fmt.Sprintf("ws%d/prefetch", ws)
				rc.BackwardPrefetch, rc.ForwardPrefetch = sweeps.BackwardPre, true
			}
			rc.WarmupSteps, rc.Steps = 1, 3
			rc.BackendOptions = map[string]any{"transport": "shm"}
			rc.AssignID()
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				var stderr syncBuffer
				res, err := New().Run(context.Background(), rc, backends.RunEnv{RunDir: dir, Stderr: &stderr}, nil)
				require.NoError(t, err)
				require.Equal(t, results.StatusOK, res.Status, "%s\n%s", res.Error, stderr.String())
				require.Len(t, res.PerRank, ws)
				for _, pr := range res.PerRank {
					b := pr.StepBreakdown
					require.NotNil(t, b, "rank %d", pr.Rank)
					f, msg := b.Check()
					require.Empty(t, f, "rank %d: %s", pr.Rank, msg)
					assert.Equal(t, "gotrain", b.Source)
					require.NotNil(t, b.AllGatherS)
					require.NotNil(t, b.ReduceScatterS)
					assert.Positive(t, *b.AllGatherS)
					if !prefetch {
						assert.InDelta(t, b.CollectiveS, b.ExposedCommS, 1e-9, "rank %d: without prefetch nothing hides communication", pr.Rank)
					}
					t.Logf("rank %d: step %.2f ms = compute %.2f + exposed %.2f + other %.2f; collectives %.2f (all-gather %.2f, reduce-scatter %.2f, all-reduce %.2f), overlap %.0f%%",
						pr.Rank, 1e3*b.StepS, 1e3*b.ComputeS, 1e3*b.ExposedCommS, 1e3*b.OtherS, 1e3*b.CollectiveS,
						1e3**b.AllGatherS, 1e3**b.ReduceScatterS, 1e3*derefF(b.AllReduceS), 100**b.Overlap())
				}
				m := results.Normalize(rc, []results.Result{res})
				require.NotNil(t, m.StepBreakdown, "the run's breakdown is the slowest rank's")

				require.Equal(t, results.TimelineFile, res.TimelinePath)
				tr := readTrace(t, filepath.Join(dir, res.TimelinePath))
				assert.Equal(t, false, tr.OtherData["truncated"])
				procs := map[int]bool{}
				threads := map[int]map[int]string{}
				steps := map[float64]bool{}
				type ev struct{ ts, end float64 }
				compute, gathers := map[int][]ev{}, map[int][]ev{}
				for _, e := range tr.TraceEvents {
					switch e.Ph {
					case "M":
						if e.Name == "process_name" {
							assert.False(t, procs[e.Pid], "one process_name per rank")
							procs[e.Pid] = true
						}
						if e.Name == "thread_name" {
							if threads[e.Pid] == nil {
								threads[e.Pid] = map[int]string{}
							}
							threads[e.Pid][e.Tid] = e.Args["name"].(string)
						}
					case "X":
						assert.GreaterOrEqual(t, e.Ts, 0.0)
						assert.GreaterOrEqual(t, e.Dur, 0.0)
						steps[e.Args["step"].(float64)] = true
						switch {
						case e.Cat == "compute":
							compute[e.Pid] = append(compute[e.Pid], ev{e.Ts, e.Ts + e.Dur})
						case e.Cat == "all-gather" && e.Tid == 2:
							gathers[e.Pid] = append(gathers[e.Pid], ev{e.Ts, e.Ts + e.Dur})
						}
					default:
						t.Errorf("event phase %q", e.Ph)
					}
				}
				require.Len(t, procs, ws, "one process per rank")
				for r := range ws {
					assert.True(t, procs[r], "rank %d is a process", r)
					assert.Contains(t, threads[r][1], "compute")
					assert.Contains(t, threads[r][2], "all-gather")
					assert.NotEmpty(t, compute[r], "rank %d computed", r)
					assert.NotEmpty(t, gathers[r], "rank %d gathered", r)
				}
				assert.Equal(t, map[float64]bool{2: true, 3: true, 4: true}, steps, "the measured steps only")
				overlap := false
				for r := range ws {
					for _, g := range gathers[r] {
						for _, c := range compute[r] {
							overlap = overlap || (c.ts < g.end && g.ts < c.end)
						}
					}
				}
				assert.Equal(t, prefetch, overlap, "an all-gather overlaps computation exactly when prefetching")
			})
		}
	}
}

// TestTimelineBounds: a rank's timeline file out of bounds fails the run's
// collection naming the rank and field, and a merged timeline over its byte
// bound keeps fewer events and says so in its metadata.
func TestTimelineBounds(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "ranks"), 0o755))
	ok := rankTimeline{Rank: 0, Source: "gotrain", Steps: []timelineStep{{Step: 1, DurUS: 100}},
		Events: []timelineEvent{{Step: 1, Name: "forward head", Cat: "compute", Lane: 1, TsUS: 1, DurUS: 2}}}
	for _, tc := range []struct {
		name, want string
		edit       func(*rankTimeline)
	}{
		{"lane", "events[0].lane is 9", func(tl *rankTimeline) { tl.Events[0].Lane = 9 }},
		{"cat", `events[0].cat is "gpu"`, func(tl *rankTimeline) { tl.Events[0].Cat = "gpu" }},
		{"negative", "events[0].dur_us is -1", func(tl *rankTimeline) { tl.Events[0].DurUS = -1 }},
		{"rank", "rank is 3", func(tl *rankTimeline) { tl.Rank = 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := ok
			tl.Events = append([]timelineEvent(nil), ok.Events...)
			tc.edit(&tl)
			b, err := json.Marshal(tl)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(rankTimelinePath(dir, 0), b, 0o644))
			_, err = readRankTimeline(dir, 0, 1)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "rank 0's timeline")
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	// 4000 events a rank, about 600 KB in all, into 200 KB.
	var ranks []rankTimeline
	for r := range 2 {
		tl := rankTimeline{Rank: r, Source: "gotrain", Dropped: 5, Steps: []timelineStep{{Step: 1, DurUS: 1e6}}}
		for i := range 4000 {
			tl.Events = append(tl.Events, timelineEvent{Step: 1, Name: "forward layers.0", Cat: "compute", Lane: 1, TsUS: float64(i), DurUS: 1})
		}
		ranks = append(ranks, tl)
	}
	path := filepath.Join(dir, "timeline.json")
	const limit = 200 << 10
	require.NoError(t, writeTimeline(path, ranks, limit))
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.LessOrEqual(t, st.Size(), int64(limit))
	tr := readTrace(t, path)
	assert.Equal(t, true, tr.OtherData["truncated"])
	kept := tr.OtherData["events"].(float64)
	assert.Greater(t, kept, 0.0)
	assert.Equal(t, 8000+10-kept, tr.OtherData["events_left_out"], "left out: the workers' dropped and the cut")
	perRank := map[int]int{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" && e.Cat == "compute" {
			perRank[e.Pid]++
		}
	}
	assert.InDelta(t, perRank[0], perRank[1], 2, "the ranks share the bytes evenly")
}

// TestTimelineFollowsTheUmask (issue 39, item 3): gotrain wrote timeline.json
// with os.CreateTemp's 0600 whatever the umask; it gets 0666 less the umask,
// as every result file.
func TestTimelineFollowsTheUmask(t *testing.T) {
	// Not parallel: the umask is the process's.
	dir := t.TempDir()
	ranks := []rankTimeline{{Rank: 0, Source: "gotrain", Steps: []timelineStep{{Step: 1, DurUS: 100}},
		Events: []timelineEvent{{Step: 1, Name: "forward head", Cat: "compute", Lane: 1, TsUS: 1, DurUS: 2}}}}
	for _, tc := range []struct {
		umask int
		want  os.FileMode
	}{{0o022, 0o644}, {0o002, 0o664}, {0o077, 0o600}} {
		old := syscall.Umask(tc.umask)
		path := filepath.Join(dir, fmt.Sprintf("timeline-%03o.json", tc.umask))
		err := writeTimeline(path, ranks, results.MaxTimelineBytes)
		syscall.Umask(old)
		require.NoError(t, err)
		st, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, tc.want, st.Mode().Perm(), "umask %03o", tc.umask)
		readTrace(t, path)
	}
}

func derefF(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
