package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf8"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// The system's bounds on a path, as Linux sets them (PATH_MAX counts the final
// NUL; NAME_MAX bounds one folder or file name). A path past them fails every
// open and mkdir with "file name too long".
const (
	pathMax = 4096 - 1
	nameMax = 255
)

// runFilesReserve is how long a path below a run's directory may be: its files
// (metrics.json, gotrain-run-config.json, the temporary files they are written
// through, slurm-<job>.out) and torchrun's torchelastic/<id>/attempt_0/<rank>/
// logs fit in it with room to spare.
const runFilesReserve = 256

// checkResultsDir refuses, before anything runs or is written, a --results under
// which the sweep's files cannot be written: a path whose run files would be
// longer than the system allows (every run used to fail on its own, exit 1, each
// quoting the 4 KB path several times), a folder name longer than NAME_MAX, a
// symbolic link on the path that loops (MkdirAll said "mkdir: file exists"), or
// something there that is not a directory. sweepDir is the sweep's folder's name
// under it (the spec's name, or name-ab); the errors are usage errors (exit 2).
func checkResultsDir(flag, dir, sweepDir string, runs []sweeps.RunConfig) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return usageError(fmt.Errorf("--%s %s: %w", flag, shortPath(dir), err))
	}
	longestID := ""
	for _, rc := range runs {
		if len(rc.ID) > len(longestID) {
			longestID = rc.ID
		}
	}
	sweepPath := filepath.Join(abs, sweepDir)
	runPath := filepath.Join(sweepPath, results.RunsDir, longestID)
	if need := len(runPath) + 1 + runFilesReserve; need > pathMax {
		most := pathMax - runFilesReserve - 1 - (len(runPath) - len(abs))
		return usageError(fmt.Errorf("--%s %s is too long: a run's files would lie %d bytes deep (<results>/%s/%s/%s/ and up to %d bytes below it), "+
			"past the system's limit of %d bytes for a path (PATH_MAX); give a results directory of at most %d bytes as an absolute path "+
			"(a shorter one, or a symbolic link to it)",
			flag, shortPath(dir), need, sweepDir, results.RunsDir, longestID, runFilesReserve, pathMax, max(most, 1)))
	}
	for p := sweepPath; ; p = filepath.Dir(p) {
		if n := len(filepath.Base(p)); n > nameMax {
			return usageError(fmt.Errorf("--%s %s: the folder name %s is %d bytes long, past the system's limit of %d (NAME_MAX); give shorter names",
				flag, shortPath(dir), shortPath(filepath.Base(p)), n, nameMax))
		}
		if filepath.Dir(p) == p {
			break
		}
	}
	// Stat follows every link on the path: a loop anywhere on it, the results
	// directory itself or a folder above it, shows here.
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return usageError(fmt.Errorf("--%s %s: stat %s: too many levels of symbolic links (a symbolic link on the path leads back to itself%s); "+
			"point it at a directory or give another path", flag, shortPath(dir), shortPath(dir), loopingLink(dir)))
	case errors.Is(err, fs.ErrNotExist):
		return nil // created with the sweep's folder
	case errors.Is(err, syscall.ENOTDIR):
		return usageError(fmt.Errorf("--%s %s: %s is a file, not a directory; give a directory", flag, shortPath(dir), shortPath(fileOnPath(dir))))
	case err != nil:
		return usageError(fmt.Errorf("--%s %s: %w", flag, shortPath(dir), err))
	case !st.IsDir():
		return usageError(fmt.Errorf("--%s %s: is not a directory (%s); give a directory, where the sweep's folder %s/ is made", flag, shortPath(dir), input.DescribeMode(st.Mode()), sweepDir))
	}
	// The sweep's own folder, when it is there, must be a directory too.
	if st, err := os.Stat(sweepPath); errors.Is(err, syscall.ELOOP) {
		return usageError(fmt.Errorf("--%s %s: stat %s: too many levels of symbolic links (%s is a symbolic link that leads back to itself%s); remove it or give another path",
			flag, shortPath(dir), shortPath(filepath.Join(dir, sweepDir)), sweepDir, loopingLink(filepath.Join(dir, sweepDir))))
	} else if err == nil && !st.IsDir() {
		return usageError(fmt.Errorf("--%s %s: %s is not a directory (%s); move it away or give another results directory", flag, shortPath(dir), sweepDir, input.DescribeMode(st.Mode())))
	}
	return nil
}

// loopingLink names the first link on path that loops (", a -> b"), or "" when
// it cannot tell: the one whose own target does not resolve for the same reason.
func loopingLink(path string) string {
	p := filepath.Clean(path)
	var chain []string // from the first folder of the path to path itself
	for q := p; ; {
		chain = append([]string{q}, chain...)
		d := filepath.Dir(q)
		if d == q || d == "." {
			break
		}
		q = d
	}
	for _, q := range chain {
		lst, err := os.Lstat(q)
		if err != nil || lst.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		if _, err := os.Stat(q); errors.Is(err, syscall.ELOOP) {
			dest, _ := os.Readlink(q)
			return fmt.Sprintf(": %s -> %s", shortPath(q), shortPath(dest))
		}
	}
	return ""
}

// shortPath cuts a path longer than a line to its start and end, saying how
// long it was: a 4 KB path quoted whole buries the message.
func shortPath(p string) string {
	const keep = 60
	if len(p) <= 2*keep+20 {
		return p
	}
	head, tail := keep, len(p)-keep
	for head > 0 && !utf8.RuneStart(p[head]) { // cut between characters
		head--
	}
	for tail < len(p) && !utf8.RuneStart(p[tail]) {
		tail++
	}
	return fmt.Sprintf("%s…(%d bytes)…%s", p[:head], len(p), p[tail:])
}

// fileOnPath is the first part of path (a folder above it, or path itself) that
// is not a directory, for a message that says which; path itself when none is
// found (the file was removed meanwhile).
func fileOnPath(path string) string {
	var parts []string
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		parts = append(parts, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	for i := len(parts) - 1; i >= 0; i-- {
		if st, err := os.Stat(parts[i]); err == nil && !st.IsDir() {
			return parts[i]
		}
	}
	return path
}
