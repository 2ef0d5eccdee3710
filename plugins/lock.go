package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// LockFileEnv names the environment variable that moves the lock file.
const LockFileEnv = "FSDPBENCH_PLUGIN_LOCK"

// Lock is plugins.lock: the plugin binaries that may run, each pinned by path and
// SHA-256. A plugin that is not in it, sits at another path, or whose binary
// changed does not run.
type Lock struct {
	Plugins []LockEntry `json:"plugins"`
}

// LockEntry pins one plugin.
type LockEntry struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// LockPath is where plugins.lock lives: $FSDPBENCH_PLUGIN_LOCK, else
// ~/.fsdpbench/plugins.lock (beside the default plugin directory).
func LockPath() string {
	if p := os.Getenv(LockFileEnv); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".fsdpbench", "plugins.lock")
	}
	return filepath.Join(home, ".fsdpbench", "plugins.lock")
}

// ReadLock reads the lock file at path; a missing file is an error that
// errors.Is(err, fs.ErrNotExist) recognizes.
func ReadLock(path string) (Lock, error) {
	var l Lock
	data, err := input.ReadJSON(path, input.RunFile)
	if err != nil {
		return l, err
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return l, fmt.Errorf("%s: %w", contract.JSONPos(path, data, err), err)
	}
	for i, e := range l.Plugins {
		if sum, err := hex.DecodeString(e.SHA256); err != nil || len(sum) != sha256.Size {
			return l, fmt.Errorf("%s: plugins[%d] (%s): sha256 %q is not 64 hex digits", path, i, e.Name, e.SHA256)
		}
	}
	return l, nil
}

// Entry returns the entry pinning name.
func (l Lock) Entry(name string) (LockEntry, bool) {
	for _, e := range l.Plugins {
		if e.Name == name {
			return e, true
		}
	}
	return LockEntry{}, false
}

// WriteLock writes l to path atomically (temp file + rename), sorted by name.
func WriteLock(path string, l Lock) error {
	sort.Slice(l.Plugins, func(i, j int) bool { return l.Plugins[i].Name < l.Plugins[j].Name })
	if l.Plugins == nil {
		l.Plugins = []LockEntry{}
	}
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing the lock file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".plugins.lock-*")
	if err != nil {
		return fmt.Errorf("writing the lock file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing the lock file: %w", err)
	}
	return nil
}

// Pin hashes the plugins found into a lock; plugins that cannot run anyway (not
// executable) are left out.
func Pin(found []Found) (Lock, error) {
	var l Lock
	for _, f := range found {
		if f.Problem != "" {
			continue
		}
		sum, err := FileSHA256(f.Path)
		if err != nil {
			return l, err
		}
		l.Plugins = append(l.Plugins, LockEntry{Name: f.Name, Path: f.Path, SHA256: sum})
	}
	return l, nil
}

// FileSHA256 returns the hex SHA-256 of the file at path.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// refusal says why the plugin found at f may not run under the lock file at
// lockPath (read as l, lerr), or "" when the lock pins it; sum is the pinned hash.
func refusal(f Found, lockPath string, l Lock, lerr error) (string, []byte) {
	fix := "run `fsdpbench plugins lock` to pin the plugins found now"
	switch {
	case f.Problem != "":
		return f.Problem, nil
	case errors.Is(lerr, os.ErrNotExist):
		return fmt.Sprintf("not pinned: there is no lock file at %s, and plugins run only once pinned; %s ($%s moves the file)", lockPath, fix, LockFileEnv), nil
	case lerr != nil:
		return fmt.Sprintf("the lock file is unreadable (%v); fix it, or %s", lerr, fix), nil
	}
	e, ok := l.Entry(f.Name)
	if !ok {
		return fmt.Sprintf("not pinned in %s; %s", lockPath, fix), nil
	}
	if filepath.Clean(e.Path) != filepath.Clean(f.Path) {
		return fmt.Sprintf("%s pins plugin %s to %s, but %s comes first on the plugin path; %s if that is the one to run", lockPath, f.Name, e.Path, f.Path, fix), nil
	}
	sum, _ := hex.DecodeString(e.SHA256) // ReadLock checked it
	return "", sum
}
