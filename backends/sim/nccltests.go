package sim

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// Bounds on nccl-tests output. A sweep from 8 B to 8 GiB doubling is 31 rows; a
// file of more than maxNCCLRows rows or maxNCCLBytes bytes is not one run's
// output. Sizes past 1 TiB and busbw past maxBusBWGBps are typos or corruption.
const (
	maxNCCLBytes = 4 << 20
	maxNCCLRows  = 10_000
	maxNCCLSize  = 1 << 40
)

// NCCLTestsLimits bound a nccl-tests output file where it enters.
var NCCLTestsLimits = input.Limits{What: "nccl-tests output", MaxBytes: maxNCCLBytes}

// NCCLTestsResult is what one nccl-tests run measured.
type NCCLTestsResult struct {
	// Collective is AllGather, ReduceScatter or AllReduce.
	Collective string `json:"collective"`
	// Ranks and Nodes count the "# Rank r ... on HOST" lines and their hosts.
	Ranks int `json:"ranks"`
	Nodes int `json:"nodes"`
	// Curve is the out-of-place busbw by size (rows whose busbw rounds to 0.00
	// dropped).
	Curve Curve `json:"curve"`
}

// NCCLTestsError is a problem at a line of a nccl-tests output.
type NCCLTestsError struct {
	Path string
	Line int // 0 for the file as a whole
	Msg  string
}

func (e *NCCLTestsError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Path, e.Msg)
}

// ReadNCCLTests reads the output of all_gather_perf, reduce_scatter_perf or
// all_reduce_perf from path (bounded by NCCLTestsLimits).
func ReadNCCLTests(path string) (NCCLTestsResult, error) {
	data, err := input.ReadFile(path, NCCLTestsLimits)
	if err != nil {
		return NCCLTestsResult{}, err
	}
	return ParseNCCLTests(path, data)
}

// ncclColumns is nccl-tests' data row: size count type redop root, then time
// algbw busbw #wrong out of place and again in place.
const ncclColumns = 13

// ParseNCCLTests parses nccl-tests output as its binaries print it: comment lines
// start with "#" (the "# Collective test starting: all_gather_perf" banner of
// recent versions, "#  Rank  0 Group  0 Pid 123 on host device 0 [...]" lines,
// the column headers), data rows have 13 columns. The collective comes from the
// banner, else from the file's name; the nodes from the hosts of the Rank lines.
func ParseNCCLTests(path string, data []byte) (NCCLTestsResult, error) {
	var r NCCLTestsResult
	fail := func(line int, format string, args ...any) (NCCLTestsResult, error) {
		return NCCLTestsResult{}, &NCCLTestsError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if len(data) > maxNCCLBytes {
		return fail(0, "%d bytes, more than the %d one nccl-tests run prints", len(data), maxNCCLBytes)
	}
	hosts := map[string]bool{}
	bySize := map[float64]float64{}
	rows, lineNo := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if c, ok := strings.CutPrefix(line, "#"); ok {
			f := strings.Fields(c)
			switch {
			case len(f) >= 4 && f[0] == "Collective" && f[1] == "test" && f[2] == "starting:":
				coll, ok := collectiveOf(f[3])
				if !ok {
					return fail(lineNo, "collective %s is not all_gather_perf, reduce_scatter_perf or all_reduce_perf", input.Quote(f[3], 40))
				}
				r.Collective = coll
			case len(f) >= 8 && f[0] == "Rank" && f[2] == "Group" && f[4] == "Pid" && f[6] == "on":
				r.Ranks++
				hosts[f[7]] = true
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) != ncclColumns {
			return fail(lineNo, "a data row has %d columns, want %d (size count type redop root time algbw busbw #wrong, out of place then in place); is this nccl-tests output?", len(f), ncclColumns)
		}
		rows++
		if rows > maxNCCLRows {
			return fail(lineNo, "more than %d data rows; one nccl-tests sweep prints a few dozen", maxNCCLRows)
		}
		size, err := strconv.ParseFloat(f[0], 64)
		if err != nil || size != math.Trunc(size) || size < 1 || size > maxNCCLSize {
			return fail(lineNo, "size %s must be a whole number of bytes in [1, %d]", input.Quote(f[0], 40), int64(maxNCCLSize))
		}
		busbw, err := strconv.ParseFloat(f[7], 64)
		if err != nil || math.IsNaN(busbw) || busbw < 0 || busbw > maxBusBWGBps {
			return fail(lineNo, "out-of-place busbw %s must be a number of GB/s in [0, %g]", input.Quote(f[7], 40), float64(maxBusBWGBps))
		}
		for _, col := range []int{8, 12} {
			if f[col] == "N/A" { // validation off (-c 0)
				continue
			}
			wrong, err := strconv.ParseInt(f[col], 10, 64)
			if err != nil || wrong < 0 {
				return fail(lineNo, "#wrong %s must be a count or N/A", input.Quote(f[col], 40))
			}
			if wrong > 0 {
				return fail(lineNo, "%d wrong values at size %s: the collective returned bad data, so its timing is no measurement; fix the fabric and run nccl-tests again", wrong, f[0])
			}
		}
		if busbw > 0 {
			bySize[size] = busbw * 1e9
		}
	}
	if err := sc.Err(); err != nil {
		return fail(lineNo+1, "%v", err)
	}
	if r.Collective == "" {
		base := filepath.Base(path)
		for _, c := range []string{AllGather, ReduceScatter, AllReduce} {
			if strings.Contains(base, c) {
				r.Collective = c
			}
		}
		if r.Collective == "" {
			return fail(0, "cannot tell which collective this measured: keep the \"# Collective test starting:\" line, or name the file after the binary (all_gather_perf.txt, reduce_scatter_perf.txt, all_reduce_perf.txt)")
		}
	}
	if r.Ranks == 0 {
		return fail(0, "no \"#  Rank N Group G Pid P on HOST device D\" lines: they tell whether the run spanned nodes; keep nccl-tests' header")
	}
	if len(bySize) == 0 {
		return fail(0, "no data row with a busbw above 0: run nccl-tests up to large sizes (-e 1G or more)")
	}
	r.Nodes = len(hosts)
	for s, bw := range bySize {
		r.Curve = append(r.Curve, CurvePoint{SizeBytes: s, BusBW: bw})
	}
	sort.Slice(r.Curve, func(i, j int) bool { return r.Curve[i].SizeBytes < r.Curve[j].SizeBytes })
	return r, nil
}

// collectiveOf maps a binary's name ("all_gather_perf", "all_gather_perf_mpi") to
// a collective.
func collectiveOf(binary string) (string, bool) {
	for _, c := range []string{AllGather, ReduceScatter, AllReduce} {
		if binary == c+"_perf" || strings.HasPrefix(binary, c+"_perf_") || binary == c+"_perf_mpi" {
			return c, true
		}
	}
	return "", false
}
