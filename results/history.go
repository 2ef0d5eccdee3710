package results

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// NightFile is the record a history night keeps beside its results: when it was
// stored, for which commit, and what the gate said.
const NightFile = "night.json"

// Night is one stored night of a history directory: <history>/<date>-<commit>/ holds
// that night's results tree (as `fsdpbench sweep` wrote it) and NightFile. A
// second night of the same date and commit (the "measure again" an inconclusive
// gate asks for) is stored beside it as <date>-<commit>-2/, and so on: a night
// is never replaced, so the history keeps every verdict the gate gave.
type Night struct {
	// Name is the directory name, <date>-<commit>, with -<Seq> from the second
	// night of that date and commit on.
	Name   string `json:"name"`
	Date   string `json:"date"` // YYYY-MM-DD
	Commit string `json:"commit"`
	// Seq numbers the nights of one date and commit from 1 (0 in nights older
	// versions stored, which replaced one another).
	Seq int `json:"seq,omitempty"`
	// StoredAt orders nights of the same date.
	StoredAt time.Time `json:"stored_at"`
	// Passed is the gate's verdict on the night. Only a night that passed is ever a
	// baseline (LastPassingNight).
	Passed bool `json:"passed"`
	// Verdict is the gate's verdict: pass, fail or inconclusive (an inconclusive
	// night did not pass, but nothing in it failed either: the trend marks it
	// apart from a failed one). Empty in night.json files older versions wrote;
	// Nights fills it in (nightVerdict).
	Verdict Outcome `json:"verdict,omitempty"`
	// Inconclusive counts the gate's inconclusive checks.
	Inconclusive int `json:"inconclusive,omitempty"`
	// Baseline names the night (or path) the gate compared with; empty for none.
	Baseline string `json:"baseline,omitempty"`
	Failures int    `json:"failures"`
	Checks   int    `json:"checks"`
	// Problems are the gate's reasons to fail besides failed checks.
	Problems []string `json:"problems,omitempty"`
	// Checksum is the SHA-256 of the fields above and of every file of the night's
	// results (nightChecksum): a night whose night.json or runs were changed
	// after the gate stored them (a failed night edited to "passed": true) is
	// refused as a baseline. Empty in nights older versions stored, which are no
	// baseline.
	Checksum string `json:"checksum,omitempty"`
	// Dir is the night's directory (not stored).
	Dir string `json:"-"`
}

// commitText keeps a commit (or any label) usable in a directory name.
var commitText = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// NightName is the directory name of a night: 2026-01-02-<commit>, the commit cut
// to 12 characters.
func NightName(date time.Time, commit string) string {
	c := commitText.ReplaceAllString(commit, "_")
	if c == "" {
		c = "unknown"
	}
	if len(c) > 12 {
		c = c[:12]
	}
	return date.UTC().Format(time.DateOnly) + "-" + c
}

// CommitOf is the fsdpbench commit the runs recorded (Env.Commit of the first run
// that has one), or "".
func CommitOf(runs []Run) string {
	for i := range runs {
		if c := runs[i].Metrics.Env.Commit; c != "" {
			return c
		}
	}
	return ""
}

// RecordedCommit is the commit a results directory recorded: its manifest.json's
// env.commit (every sweep writes one, whatever the backend), then that of the
// manifest of each sweep its runs belong to (a directory of several sweeps),
// then a run's metrics.json env.commit (CommitOf); "" when none did. The
// manifest comes first: gotrain's runs record no commit of their own, and a
// night named <date>-unknown could not be told from another commit's.
func RecordedCommit(dir string, runs []Run) string {
	manifests := []string{filepath.Join(dir, ManifestFile)}
	for i := range runs {
		if runs[i].Dir != "" {
			// <sweep>/runs/<id>: the sweep's manifest is two levels up.
			manifests = append(manifests, filepath.Join(filepath.Dir(filepath.Dir(runs[i].Dir)), ManifestFile))
		}
	}
	seen := map[string]bool{}
	for _, path := range manifests {
		if seen[path] {
			continue
		}
		seen[path] = true
		var m Manifest
		if err := readJSON(path, &m); err == nil && m.Env.Commit != "" {
			return m.Env.Commit
		}
	}
	return CommitOf(runs)
}

// nightVerdict is n's verdict: the one stored, or for a night.json older
// versions wrote (no verdict field) pass when it passed, inconclusive when it did
// not pass although no check failed and the gate named no problem (the one way
// those versions stored a night that neither passed nor failed), else fail.
func nightVerdict(n *Night) Outcome {
	switch {
	case n.Verdict != "":
		return n.Verdict
	case n.Passed:
		return OutcomePass
	case n.Failures == 0 && len(n.Problems) == 0:
		return OutcomeInconclusive
	}
	return OutcomeFail
}

// Nights lists the nights stored in a history directory, oldest first (by date, then
// by the time stored). A missing directory holds no nights.
func Nights(history string) ([]Night, error) {
	entries, err := os.ReadDir(history)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", history, err)
	}
	var out []Night
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		dir := filepath.Join(history, e.Name())
		var n Night
		if err := readNight(dir, &n); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // not a night: a directory someone put there
			}
			return nil, fmt.Errorf("history night %s: %w", dir, err)
		}
		n.Name, n.Dir = e.Name(), dir
		n.Verdict = nightVerdict(&n)
		out = append(out, n)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Date != out[j].Date {
			return out[i].Date < out[j].Date
		}
		if !out[i].StoredAt.Equal(out[j].StoredAt) {
			return out[i].StoredAt.Before(out[j].StoredAt)
		}
		if out[i].Seq != out[j].Seq {
			return out[i].Seq < out[j].Seq
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// MaxFutureDate is how far past today (UTC) a night's --date may lie: a day, for
// a job whose time zone is ahead of UTC. A later label (a typo, a skewed CI
// clock) would otherwise sort after every night to come.
const MaxFutureDate = 24 * time.Hour

// CheckNightDate refuses a night's date beyond now plus MaxFutureDate.
func CheckNightDate(date, now time.Time) error {
	if date.After(now.UTC().Add(MaxFutureDate)) {
		return fmt.Errorf("date %s is after tomorrow (UTC): a night labelled in the future would be every later night's baseline; give today's date (or --allow-future-date to store it as labelled)",
			date.UTC().Format(time.DateOnly))
	}
	return nil
}

// storedOrder is when a night counts as stored when the baseline is picked: its
// recorded storage time, but no later than the end of its date, so that a night
// backfilled today under an old date stays among the old nights, and a night
// labelled with a future date counts from when it was stored, not from its label.
func (n *Night) storedOrder() time.Time {
	end, err := time.Parse(time.DateOnly, n.Date)
	if err != nil {
		return n.StoredAt
	}
	end = end.Add(24 * time.Hour)
	if n.StoredAt.IsZero() || n.StoredAt.After(end) {
		return end
	}
	return n.StoredAt
}

// LastPassingNight is the night stored last (by storedOrder, not the date label
// alone) whose gate passed and whose results hold an ok run: the baseline of the
// next night. A night that did not pass is never a baseline; nor is one stored as
// passed that holds nothing to compare with (an empty night that older versions
// passed), nor one that counts as stored more than MaxFutureDate from now (a
// clock that was wrong then). nil when there is none yet.
func LastPassingNight(history string) (*Night, error) {
	nights, err := Nights(history)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(nights, func(i, j int) bool {
		return nights[i].storedOrder().Before(nights[j].storedOrder())
	})
	limit := time.Now().Add(MaxFutureDate)
	for i := len(nights) - 1; i >= 0; i-- {
		if !nights[i].Passed || nights[i].storedOrder().After(limit) || nights[i].Checksum == "" {
			continue
		}
		if err := verifyNight(nights[i].Dir); err != nil {
			return nil, err
		}
		runs, err := Load(nights[i].Dir)
		if err != nil {
			return nil, fmt.Errorf("history night %s: %w", nights[i].Dir, err)
		}
		for j := range runs {
			if runs[j].Metrics.Status == StatusOK {
				return &nights[i], nil
			}
		}
	}
	return nil, nil
}

// MaxNightsPerCommit bounds the nights of one date and commit (<name>-2 up to
// <name>-MaxNightsPerCommit): a job that gates in a loop stops with an error
// rather than filling the disk.
const MaxNightsPerCommit = 1000

// StoreNight copies the results tree at resultsDir into <history>/<NightName>/ with
// the gate's verdict, which it needs: a night with no verdict never passes. A night
// is never replaced: a second night of the same date and commit (measured again
// after an inconclusive or failed gate) goes to <NightName>-2/, a third to -3/, so
// the history keeps each with its own verdict. The copy is made beside the target
// and renamed into place, so a killed job never leaves half a night that a later
// gate would take as its baseline; a name another gate took meanwhile is not
// overwritten (the rename fails and the next number is tried).
func StoreNight(history, resultsDir string, date time.Time, commit string, report *GateReport, baseline string) (Night, error) {
	if report == nil {
		return Night{}, errors.New("history: a night is stored with the gate's verdict; run the gate first")
	}
	if _, err := Load(resultsDir); err != nil {
		return Night{}, fmt.Errorf("history: %w", err)
	}
	// 0777 and the umask, as every other output: a shared history must be
	// readable by the colleagues the umask allows.
	if err := os.MkdirAll(history, 0o777); err != nil {
		return Night{}, fmt.Errorf("history %s: %w", history, err)
	}
	base := NightName(date, commit)
	n := Night{Name: base, Date: date.UTC().Format(time.DateOnly), Commit: commit,
		StoredAt: time.Now().UTC(), Baseline: baseline}
	n.Passed, n.Failures, n.Checks = report.Passed, report.Failures, len(report.Checks)
	n.Verdict, n.Inconclusive = report.Verdict, report.Inconclusive
	if n.Verdict == "" {
		n.Verdict = OutcomeFail
		if n.Passed {
			n.Verdict = OutcomePass
		}
	}
	n.Problems = report.Problems
	n.Dir = filepath.Join(history, n.Name)
	tmp, err := mkdirTemp(history, "."+n.Name+".tmp")
	if err != nil {
		return Night{}, fmt.Errorf("history: storing %s: %w", n.Dir, bareErr(err))
	}
	defer os.RemoveAll(tmp)
	// CopyFS refuses to write into an existing directory's files, not the directory.
	if err := os.CopyFS(tmp, os.DirFS(resultsDir)); err != nil {
		// Errors name the temporary copy; the user knows the night's directory.
		return Night{}, fmt.Errorf("history: copying %s to %s: %w", resultsDir, n.Dir, bareErr(err))
	}
	for seq := 1; seq <= MaxNightsPerCommit; seq++ {
		n.Seq, n.Name = seq, base
		if seq > 1 {
			n.Name = fmt.Sprintf("%s-%d", base, seq)
		}
		n.Dir = filepath.Join(history, n.Name)
		if _, err := os.Lstat(n.Dir); err == nil {
			continue // taken: an earlier night of this date and commit
		}
		// The name and number are part of what the checksum seals.
		n.Checksum, err = nightChecksum(n, tmp)
		var b []byte
		if err == nil {
			b, err = json.MarshalIndent(n, "", "  ")
		}
		if err == nil {
			// Plainly written: the directory is renamed into place only once whole.
			err = os.WriteFile(filepath.Join(tmp, NightFile), append(b, '\n'), 0o666)
		}
		if err != nil {
			return Night{}, fmt.Errorf("history: storing %s: %w", filepath.Join(n.Dir, NightFile), bareErr(err))
		}
		// rename(2) replaces an empty directory but never a night (night.json
		// is in it): a night another gate stored since the Lstat stays.
		if err := os.Rename(tmp, n.Dir); err != nil {
			if _, serr := os.Lstat(n.Dir); serr == nil {
				continue
			}
			return Night{}, fmt.Errorf("history: storing %s: %w", n.Dir, bareErr(err))
		}
		return n, nil
	}
	return Night{}, fmt.Errorf("history: %d nights of %s are stored already (%s to %s-%d); move old ones out of %s", MaxNightsPerCommit, base, base, base, MaxNightsPerCommit, history)
}

// NightRuns is one night's runs, for trends.
type NightRuns struct {
	Night Night
	Runs  []Run
}

// nightChecksum is the SHA-256, in hex, of n's stored fields (Checksum empty)
// and of every file under dir but NightFile: each one's path, size and SHA-256,
// in lexical order. It detects a night edited after the gate stored it; it is
// not a signature (whoever edits the files can compute it again).
func nightChecksum(n Night, dir string) (string, error) {
	n.Checksum = ""
	b, err := json.Marshal(n)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(b)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		switch {
		case rel == NightFile:
			return nil
		case d.IsDir():
			fmt.Fprintf(h, "\x00dir %s", filepath.ToSlash(rel))
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: not a regular file (a night holds only the files the gate copied)", path)
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fh := sha256.New()
		size, err := io.Copy(fh, f)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "\x00file %s %d %x", filepath.ToSlash(rel), size, fh.Sum(nil))
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readNight reads dir's NightFile into n. A night.json that does not read is
// damaged, and readJSON's advice for a run's file (rerun the sweep, or delete
// the run's directory) does not mend it: no sweep rewrites a night, and
// deleting part of one leaves the rest in the history. The way out is the
// checksum mismatch's: restore the night, or move it out of the history. A
// night.json that does not exist is returned as is: the directory is no night.
func readNight(dir string, n *Night) error {
	path := filepath.Join(dir, NightFile)
	b, err := input.ReadJSON(path, input.Metrics)
	if errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err == nil {
		if uerr := json.Unmarshal(b, n); uerr != nil {
			err = fmt.Errorf("%s: %w", path, uerr)
		}
	}
	if err != nil {
		return fmt.Errorf("%w (the file is damaged: restore the night, or move it out of the history; a night is a baseline only as the gate stored it)", err)
	}
	return nil
}

// verifyNight checks that the night at dir is as the gate stored it: its
// night.json and files agree with the checksum night.json holds.
func verifyNight(dir string) error {
	var n Night
	if err := readNight(dir, &n); err != nil {
		return fmt.Errorf("history night %s: %w", dir, err)
	}
	sum, err := nightChecksum(n, dir)
	if err != nil {
		return fmt.Errorf("history night %s: %w", dir, err)
	}
	if sum != n.Checksum {
		return fmt.Errorf("history night %s: its %s or results were changed after the gate stored them (checksum %.12s, the files give %.12s): restore the night, or move it out of the history; a night is a baseline only as the gate stored it",
			dir, NightFile, n.Checksum, sum)
	}
	return nil
}

// UnsealedNights counts the nights stored as passed that carry no checksum
// (stored by an older fsdpbench, or edited): LastPassingNight takes none of them.
func UnsealedNights(history string) int {
	nights, _ := Nights(history)
	c := 0
	for _, n := range nights {
		if n.Passed && n.Checksum == "" {
			c++
		}
	}
	return c
}

// mkdirTemp is os.MkdirTemp with mode 0777, which the kernel masks with the
// umask (os.MkdirTemp's 0700 ignores it, and a stored night kept it).
func mkdirTemp(dir, prefix string) (string, error) {
	for range 1000 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		err := os.Mkdir(name, 0o777)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return name, err
	}
	return "", fmt.Errorf("no free temporary name in %s", dir)
}
