package harness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fsdpbench/fsdpbench/results"
)

// writeSteps stores the measured steps of every repeat, one after the other, as
// steps.csv (results.StepsCSV: step, loss, step_time_s, tokens).
func writeSteps(path string, repeats []results.Result) error {
	var steps []results.Step
	for _, r := range repeats {
		steps = append(steps, r.Steps...)
	}
	var buf bytes.Buffer
	if err := results.StepsCSV(&buf, steps); err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return results.WriteFileAtomic(path, buf.Bytes())
}

// writeRanks stores what each rank reported as ranks/rank-<r>.json, leaving alone
// the files a backend wrote there itself (they may hold more than RankResult).
func writeRanks(dir string, ranks []results.RankResult) error {
	if len(ranks) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o777); err != nil { // the umask decides, as for files
		return fmt.Errorf("ranks directory: %w", err)
	}
	for _, rr := range ranks {
		path := filepath.Join(dir, "rank-"+strconv.Itoa(rr.Rank)+".json")
		if _, err := os.Stat(path); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		b, err := json.MarshalIndent(rr, "", "  ")
		if err != nil {
			return fmt.Errorf("encode %s: %w", path, err)
		}
		if err := results.WriteFileAtomic(path, append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}
