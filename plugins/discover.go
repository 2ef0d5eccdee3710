package plugins

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Prefix starts the file name of every plugin binary: fsdpbench-backend-<name>.
const Prefix = "fsdpbench-backend-"

// PathEnv names the environment variable that lists plugin directories, separated
// like PATH (os.PathListSeparator).
const PathEnv = "FSDPBENCH_PLUGIN_PATH"

// validName is what a backend name may be: it appears in specs and run IDs.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// Found is a plugin binary on the search path.
type Found struct {
	Name string
	Path string
	// Problem says why the file cannot run as a plugin (not executable), if so.
	Problem string
}

// SearchPath is where plugins are looked for, in order: the directories of
// $FSDPBENCH_PLUGIN_PATH, then ~/.fsdpbench/plugins.
func SearchPath() []string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv(PathEnv)) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".fsdpbench", "plugins"))
	}
	return dirs
}

// Discover lists the plugin binaries in dirs. As with PATH, the first directory
// that holds a name wins; missing directories are skipped. Paths are absolute.
func Discover(dirs []string) []Found {
	seen := map[string]bool{}
	var out []Found
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue // a directory on the path that does not exist holds no plugins
		}
		var here []Found
		for _, e := range entries {
			name, ok := strings.CutPrefix(e.Name(), Prefix)
			if !ok || seen[name] || !validName.MatchString(name) {
				continue
			}
			path, err := filepath.Abs(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			info, err := os.Stat(path) // follows symlinks
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			f := Found{Name: name, Path: path}
			if info.Mode().Perm()&0o111 == 0 {
				f.Problem = fmt.Sprintf("%s is not executable; chmod +x it", path)
			}
			seen[name] = true
			here = append(here, f)
		}
		out = append(out, here...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Load finds the plugins on dirs and returns them as backends, each checked
// against the lock file at lockPath: one it does not pin, or pins at another path,
// is returned but refuses to run (and `fsdpbench backends` says why); one whose
// binary changed is refused by go-plugin's checksum check when it starts. taken
// reports names that belong to built-in backends; those plugins are skipped.
func Load(dirs []string, lockPath string, taken func(string) bool, opts Options) []*Backend {
	found := Discover(dirs)
	if len(found) == 0 {
		return nil
	}
	l, lerr := ReadLock(lockPath)
	var out []*Backend
	for _, f := range found {
		if taken != nil && taken(f.Name) {
			continue
		}
		why, sum := refusal(f, lockPath, l, lerr)
		o := opts
		o.Checksum = sum
		b := New(f.Name, f.Path, o)
		b.refusal = why
		b.lockPath = lockPath
		out = append(out, b)
	}
	return out
}
