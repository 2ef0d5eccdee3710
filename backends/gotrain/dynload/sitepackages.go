// Package dynload opens shared libraries at run time (dlopen/dlsym) so the
// product builds without CUDA or NCCL headers and runs on machines without
// them, failing with an error that lists every place it looked.
//
// A library is found through a search list: the environment override first
// (exclusive: a path the user named is never silently replaced by another),
// then the dynamic loader's default path by soname, then the Python
// environment's site-packages/nvidia/<pkg>/lib, where pip wheels of NCCL and
// cuBLAS put them on GPU images.
//
// Without cgo (CGO_ENABLED=0) only the search for site-packages is built:
// dlopen needs cgo, and the packages that load libraries have stubs of their own.
package dynload

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsdpbench/fsdpbench/backends/contract"
)

// pythonTimeout bounds each interpreter probe: a broken shim or a slow
// network home must not stall a run that only wanted to know where NCCL is.
const pythonTimeout = 3 * time.Second

// pyScript prints the interpreter's site-packages directories, one a line.
const pyScript = `import site,sys
p=[]
try: p+=site.getsitepackages()
except Exception: pass
try: p.append(site.getusersitepackages())
except Exception: pass
p+=[x for x in sys.path if x.endswith("-packages")]
print("\n".join(p))`

var (
	siteOnce sync.Once
	siteDirs []string
)

// SitePackages returns the Python environment's site-packages directories
// that exist: those python3 (from PATH, then /usr/bin/python3) reports, then
// the usual locations ($VIRTUAL_ENV, $CONDA_PREFIX, /usr/local, /usr, ~/.local).
// It runs the interpreters once per process.
func SitePackages() []string {
	siteOnce.Do(func() {
		var pythons []string
		if p, err := exec.LookPath("python3"); err == nil {
			pythons = append(pythons, p)
		}
		pythons = append(pythons, "/usr/bin/python3")
		siteDirs = sitePackages(pythons, usualSitePackageGlobs())
	})
	return append([]string(nil), siteDirs...)
}

func usualSitePackageGlobs() []string {
	var roots []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if r := os.Getenv(v); r != "" {
			roots = append(roots, r)
		}
	}
	roots = append(roots, "/usr/local", "/usr", "/opt/conda")
	if h, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(h, ".local"))
	}
	var globs []string
	for _, r := range roots {
		globs = append(globs, filepath.Join(r, "lib", "python3*", "site-packages"), filepath.Join(r, "lib", "python3*", "dist-packages"))
	}
	return append(globs, "/usr/lib/python3/dist-packages")
}

// sitePackages asks each interpreter, then expands globs, keeping existing
// directories once each in the order found.
func sitePackages(pythons, globs []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(d string) {
		d = filepath.Clean(strings.TrimSpace(d))
		if d == "." || seen[d] {
			return
		}
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return
		}
		seen[d] = true
		out = append(out, d)
	}
	tried := map[string]bool{}
	for _, py := range pythons {
		if tried[py] {
			continue
		}
		tried[py] = true
		ctx, cancel := context.WithTimeout(context.Background(), pythonTimeout)
		cmd := exec.CommandContext(ctx, py, "-c", pyScript)
		var b bytes.Buffer
		cmd.Stdout = &b
		// The probe dies with the worker that asked: a killed worker (a chaos test's
		// SIGKILL, a cancelled run) leaves no python behind.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		release, err := contract.Tie(cmd.Start)
		if err == nil {
			err = cmd.Wait()
			release()
		}
		cancel()
		if err != nil {
			continue
		}
		for _, l := range strings.Split(b.String(), "\n") {
			add(l)
		}
	}
	for _, g := range globs {
		ms, _ := filepath.Glob(g)
		for _, m := range ms {
			add(m)
		}
	}
	return out
}
