package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fsdpbench/fsdpbench/harness/dirlock"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// guardInputs refuses a sweep that would write over one of its own inputs: a spec
// kept in the sweep's results directory as sweep.yaml (replaced by the resolved
// spec, comments and all), as manifest.json or the index (rewritten as runs
// finish), or a file under runs/. writeSpec is false when the input at sweep.yaml
// already holds the resolved spec (a stored sweep's own sweep.yaml run again to
// resume it): nothing would change but the first line naming the source, so
// nothing is written and nothing is refused.
func guardInputs(sweepDir string, inputs []string, resolved []byte) (writeSpec bool, err error) {
	writeSpec = true
	written := []string{results.SpecFile, results.ManifestFile, results.IndexFile, dirlock.File}
	runs := filepath.Join(realPath(sweepDir), results.RunsDir)
	for _, in := range inputs {
		ist, err := os.Stat(in)
		if err != nil {
			continue // not a file on disk (stdin, a generated spec): nothing to overwrite
		}
		for _, name := range written {
			st, err := os.Stat(filepath.Join(sweepDir, name))
			if err != nil || !os.SameFile(ist, st) {
				continue
			}
			if name == results.SpecFile {
				if b, err := input.ReadFile(in, input.Spec); err == nil && sameResolved(b, resolved) {
					writeSpec = false
					continue
				}
			}
			return false, fmt.Errorf("%s is the sweep's own %s in %s, which the sweep writes: running it would overwrite your file; move it out of %s (or give --results another directory)",
				in, name, sweepDir, sweepDir)
		}
		if rel, err := filepath.Rel(runs, realPath(in)); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return false, fmt.Errorf("%s is inside %s, where the sweep writes its runs: move it out of %s", in, runs, sweepDir)
		}
	}
	return writeSpec, nil
}

// realPath is path made absolute with its links resolved, or as clean as it gets.
func realPath(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		path = a
	}
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return filepath.Clean(path)
}

// resolvedHeader starts every resolved spec (sweeps' Resolved).
const resolvedHeader = "# The sweep spec as run (resolved from "

// sameResolved reports whether stored is a resolved spec saying what resolved
// says, the first line (which names the file it was resolved from) aside. A file
// that is no resolved spec (a user's, with its comments) never is.
func sameResolved(stored, resolved []byte) bool {
	if !bytes.HasPrefix(stored, []byte(resolvedHeader)) || !bytes.HasPrefix(resolved, []byte(resolvedHeader)) {
		return false
	}
	body := func(b []byte) []byte { return b[bytes.IndexByte(b, '\n')+1:] }
	return bytes.Equal(body(stored), body(resolved))
}
