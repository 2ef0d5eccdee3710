package harness

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fsdpbench/fsdpbench/results"
)

// writeSteps stores the measured steps of every repeat as steps.csv
// (step, loss, step_time_s, tokens; DESIGN.md), repeats one after the other.
func writeSteps(path string, repeats []results.Result) error {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write([]string{"step", "loss", "step_time_s", "tokens"})
	for _, r := range repeats {
		for _, st := range r.Steps {
			loss := "" // unknown, never 0
			if st.Loss != nil {
				loss = strconv.FormatFloat(*st.Loss, 'g', -1, 64)
			}
			_ = w.Write([]string{
				strconv.Itoa(st.Step), loss,
				strconv.FormatFloat(st.StepTimeS, 'g', -1, 64),
				strconv.FormatInt(st.Tokens, 10),
			})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
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
