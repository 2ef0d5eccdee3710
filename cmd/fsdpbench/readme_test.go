package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// updateReadme rewrites the README's sample outputs from the binary's:
// go test ./cmd/fsdpbench -run TestReadmeOutputs -update-readme
var updateReadme = flag.Bool("update-readme", false, "rewrite README.md's `$ fsdpbench ...` sample outputs from the binary")

// readmeBlock is a fenced code block of the README: its lines between the fences,
// and where they start in the file (0-based line index).
type readmeBlock struct {
	start int
	lines []string
}

// readmeBlocks splits the README into its fenced code blocks.
func readmeBlocks(lines []string) []readmeBlock {
	var out []readmeBlock
	in := -1
	for i, l := range lines {
		if !strings.HasPrefix(l, "```") {
			continue
		}
		if in < 0 {
			in = i + 1
			continue
		}
		out = append(out, readmeBlock{start: in, lines: lines[in:i]})
		in = -1
	}
	return out
}

// readmePath is the repository's README.
func readmePath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../README.md")
	require.NoError(t, err)
	return p
}

// TestReadmeOutputs runs every sample of the README that shows a command with its
// output (a code block whose first line is `$ fsdpbench ...`) and compares the
// block with what the binary prints on stdout now: a sample that no longer matches
// (the quickstart showed 4.62 GiB where the sweep printed 5.81) fails, naming the
// first line that differs. -update-readme rewrites the samples instead. A sample
// whose last line is "(exit N)" shows a command that exits N (a gate that could not
// tell exits 3); every other sample exits 0.
func TestReadmeOutputs(t *testing.T) {
	t.Parallel()
	path := readmePath(t)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	root := filepath.Dir(path)
	// The commands name paths relative to the repository (sweeps/examples/...);
	// they run in a directory of their own, so that what they write
	// (fsdpbench-results/) and read by default (a calibration.json there) is not
	// the checkout's.
	dir := t.TempDir()
	for _, d := range []string{"sweeps", "examples"} {
		require.NoError(t, os.Symlink(filepath.Join(root, d), filepath.Join(dir, d)))
	}

	samples := 0
	updated := false
	blocks := readmeBlocks(lines)
	for bi := len(blocks) - 1; bi >= 0; bi-- { // from the end, so that rewriting keeps earlier line numbers
		b := blocks[bi]
		if len(b.lines) == 0 || !strings.HasPrefix(b.lines[0], "$ fsdpbench ") {
			continue
		}
		samples++
		cmdline := strings.TrimPrefix(b.lines[0], "$ ")
		n := 1
		for strings.HasSuffix(cmdline, `\`) && n < len(b.lines) {
			cmdline = strings.TrimRight(strings.TrimSuffix(cmdline, `\`), " ") + " " + strings.TrimSpace(b.lines[n])
			n++
		}
		require.NotContains(t, cmdline, `"`, "README.md:%d: the test splits a sample's command at spaces; write it without quotes", b.start+1)
		require.NotContains(t, cmdline, `'`, "README.md:%d: the test splits a sample's command at spaces; write it without quotes", b.start+1)
		args := strings.Fields(cmdline)[1:]
		res := fsdpbench(t, dir, args...)
		want := b.lines[n:]
		code, exit := 0, ""
		if k := len(want) - 1; k >= 0 {
			if _, err := fmt.Sscanf(want[k], "(exit %d)", &code); err == nil {
				exit, want = want[k], want[:k]
			}
		}
		require.Equal(t, code, res.code, "README.md:%d: %s: %s", b.start+1, cmdline, res.stderr)
		got := strings.Split(strings.TrimRight(res.stdout, "\n"), "\n")
		for i := range got {
			got[i] = strings.TrimRight(got[i], " ")
		}
		if exit != "" {
			got = append(got, exit)
			want = append(want, exit)
		}
		if *updateReadme {
			if strings.Join(want, "\n") != strings.Join(got, "\n") {
				lines = append(lines[:b.start+n], append(got, lines[b.start+len(b.lines):]...)...)
				updated = true
			}
			continue
		}
		for i := 0; i < max(len(want), len(got)); i++ {
			w, g := "", ""
			if i < len(want) {
				w = strings.TrimRight(want[i], " ")
			}
			if i < len(got) {
				g = got[i]
			}
			if w != g {
				t.Errorf("README.md:%d: the sample of `%s` is stale: the README shows\n\t%s\nwhere the binary prints\n\t%s\nrun `go test ./cmd/fsdpbench -run TestReadmeOutputs -update-readme` and check the diff", b.start+n+i+1, cmdline, w, g)
				break
			}
		}
	}
	require.GreaterOrEqual(t, samples, 1, "README.md shows the quickstart's table as `$ fsdpbench sweep sweeps/examples/quickstart.yaml ...`")
	if updated {
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644))
		t.Log("README.md: samples rewritten")
	}
}

// TestReadmeOneName: the README installs the binary one way and calls it by one
// name, the one its own hints print (`CSV: fsdpbench export ...`), and starts
// with the two commands a newcomer needs: install and run the quickstart sweep
// (no GPU), and `make test`. Its links stay inside the repository.
func TestReadmeOneName(t *testing.T) {
	t.Parallel()
	path := readmePath(t)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	text := string(data)
	for _, other := range []string{"bin/fsdpbench", "go run ./cmd/fsdpbench", "go build -o bin"} {
		assert.NotContains(t, text, other, "the README runs fsdpbench as installed by `make install`")
	}
	var sh []string
	for _, b := range readmeBlocks(strings.Split(text, "\n")) {
		sh = append(sh, strings.Join(b.lines, "\n"))
		if len(sh) == 2 {
			break
		}
	}
	require.Len(t, sh, 2)
	assert.Regexp(t, `(?m)^make install\b`, sh[0], "the first command installs fsdpbench")
	assert.Regexp(t, `(?m)^fsdpbench sweep sweeps/examples/quickstart\.yaml$`, sh[0], "then runs the quickstart sweep")
	assert.Equal(t, "make test", strings.TrimSpace(sh[1]), "the second block runs the tests")
	spec, err := os.ReadFile(filepath.Join(filepath.Dir(path), "sweeps/examples/quickstart.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(spec), "backend: sim", "the first sweep needs no GPU")

	// Relative links resolve to a file of the repository.
	root := filepath.Dir(path)
	for _, m := range regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(text, -1) {
		target := filepath.Join(root, m[1])
		rel, err := filepath.Rel(root, target)
		require.NoError(t, err)
		assert.False(t, strings.HasPrefix(rel, ".."), "README.md links to %s, outside the repository", m[1])
		_, err = os.Stat(target)
		assert.NoError(t, err, "README.md links to %s", m[1])
	}
}
