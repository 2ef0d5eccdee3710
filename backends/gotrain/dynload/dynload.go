//go:build cgo

package dynload

// #cgo LDFLAGS: -ldl
// #include <dlfcn.h>
// #include <stdlib.h>
// #include <string.h>
//
// // dlerror is per thread; reading it in the same C call as dlopen/dlsym keeps
// // it from being lost when the goroutine moves to another thread.
// static void* fb_dlopen(const char* path, char* err, size_t errlen) {
//   dlerror();
//   void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
//   if (h == NULL) {
//     const char* e = dlerror();
//     strncpy(err, e ? e : "unknown dlopen error", errlen - 1);
//     err[errlen - 1] = 0;
//   }
//   return h;
// }
// static void* fb_dlsym(void* h, const char* name, char* err, size_t errlen) {
//   dlerror();
//   void* p = dlsym(h, name);
//   const char* e = dlerror();
//   if (e != NULL) {
//     strncpy(err, e, errlen - 1);
//     err[errlen - 1] = 0;
//     return NULL;
//   }
//   return p;
// }
// static int fb_dlclose(void* h, char* err, size_t errlen) {
//   dlerror();
//   int rc = dlclose(h);
//   if (rc != 0) {
//     const char* e = dlerror();
//     strncpy(err, e ? e : "unknown dlclose error", errlen - 1);
//     err[errlen - 1] = 0;
//   }
//   return rc;
// }
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"
)

// errLen bounds the dlerror text copied back from C.
const errLen = 1024

// Spec says how to find one library.
type Spec struct {
	// Name is the library as people call it ("NCCL"), used in errors.
	Name string
	// EnvVar names the environment variable that overrides the search with
	// one path (e.g. FSDPBENCH_LIBNCCL).
	EnvVar string
	// Sonames are tried in order through the loader's default path, newest
	// first where several major versions work.
	Sonames []string
	// PyPackages are the pip packages under site-packages/nvidia/ whose lib/
	// may hold one of Sonames ("nccl" for nvidia-nccl-cu12).
	PyPackages []string
}

// The libraries the gotrain engine loads.
var (
	// NCCL is libnccl.so.2, shipped by pip as nvidia-nccl-cu1x.
	NCCL = Spec{Name: "NCCL", EnvVar: "FSDPBENCH_LIBNCCL", Sonames: []string{"libnccl.so.2"}, PyPackages: []string{"nccl", "cu13"}}
	// CUDA is the driver API library, installed with the NVIDIA driver (never by pip).
	CUDA = Spec{Name: "CUDA driver", EnvVar: "FSDPBENCH_LIBCUDA", Sonames: []string{"libcuda.so.1"}}
	// CUBLAS is cuBLAS; 13 and 12 come from pip (nvidia-cublas), 11 from Debian's toolkit.
	CUBLAS = Spec{Name: "cuBLAS", EnvVar: "FSDPBENCH_LIBCUBLAS", Sonames: []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}, PyPackages: []string{"cublas", "cu13", "cu12"}}
	// OpenBLAS is the cpu device's GEMM: Debian's libopenblas0-pthread (the BLAS its
	// python3-torch runs on) registers libopenblas.so.0 as an alternative; the
	// pthread variant's own directory is tried when the alternative points elsewhere.
	OpenBLAS = Spec{Name: "OpenBLAS", EnvVar: "FSDPBENCH_LIBOPENBLAS", Sonames: []string{"libopenblas.so.0", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"}}
)

// Attempt is one place the search looked, and why it did not load.
type Attempt struct {
	// Path is what was passed to dlopen (a soname or a file path).
	Path string
	// Err is dlopen's message.
	Err string
}

// NotFoundError lists every attempt of a search that loaded nothing.
type NotFoundError struct {
	// Library is Spec.Name.
	Library string
	// EnvVar is Spec.EnvVar, named so the user knows how to point at a copy.
	EnvVar string
	// Tried holds the attempts in order.
	Tried []Attempt
}

// Error names the library, each path tried with dlopen's reason, and the
// variable that overrides the search.
func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s not found; tried:", e.Library)
	for _, a := range e.Tried {
		fmt.Fprintf(&b, "\n  %s: %s", a.Path, a.Err)
	}
	if e.EnvVar != "" {
		fmt.Fprintf(&b, "\nset %s to the library's path to use a copy elsewhere", e.EnvVar)
	}
	return b.String()
}

// Library is an open shared library.
type Library struct {
	// Path is the path or soname that loaded.
	Path string
	// Spec is how it was found.
	Spec Spec

	mu     sync.Mutex
	handle unsafe.Pointer
}

// Candidates returns the search list for s in order, without opening
// anything: the override alone when it is set, else the sonames and then
// each soname inside each site-packages/nvidia/<pkg>/lib that exists.
func Candidates(s Spec) []string {
	if override(s) != "" {
		return []string{override(s)}
	}
	if len(s.PyPackages) == 0 {
		return candidates(s, nil)
	}
	return candidates(s, SitePackages())
}

func override(s Spec) string {
	if s.EnvVar == "" {
		return ""
	}
	return strings.TrimSpace(os.Getenv(s.EnvVar))
}

func candidates(s Spec, sitePkgs []string) []string {
	out := append([]string(nil), s.Sonames...)
	seen := map[string]bool{}
	for _, sp := range sitePkgs {
		for _, pkg := range s.PyPackages {
			dir := filepath.Join(sp, "nvidia", pkg, "lib")
			for _, so := range s.Sonames {
				p := filepath.Join(dir, so)
				if seen[p] {
					continue
				}
				seen[p] = true
				if _, err := os.Stat(p); err == nil {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// Open loads the first candidate of s that dlopen accepts. A missing
// library returns a *NotFoundError listing every attempt (including the
// site-packages directories searched when none held the library).
func Open(s Spec) (*Library, error) {
	if o := override(s); o != "" {
		return open(s, []string{o}, nil)
	}
	var sps []string
	if len(s.PyPackages) > 0 { // finding them runs python3: not for a library pip does not ship
		sps = SitePackages()
	}
	return open(s, candidates(s, sps), sps)
}

func open(s Spec, cands, sps []string) (*Library, error) {
	var tried []Attempt
	for _, c := range cands {
		h, err := dlopen(c)
		if err != nil {
			tried = append(tried, Attempt{Path: c, Err: err.Error()})
			continue
		}
		return &Library{Path: c, Spec: s, handle: h}, nil
	}
	if len(s.PyPackages) > 0 && override(s) == "" {
		for _, pkg := range s.PyPackages {
			var dirs []string
			for _, sp := range sps {
				dirs = append(dirs, filepath.Join(sp, "nvidia", pkg, "lib"))
			}
			if len(dirs) == 0 {
				tried = append(tried, Attempt{Path: "site-packages/nvidia/" + pkg + "/lib", Err: "no Python site-packages found (python3 not runnable and no usual location exists)"})
				continue
			}
			tried = append(tried, Attempt{Path: strings.Join(dirs, ", "), Err: "no " + strings.Join(s.Sonames, " or ") + " there (pip's nvidia-* wheels install it there)"})
		}
	}
	return nil, &NotFoundError{Library: s.Name, EnvVar: s.EnvVar, Tried: tried}
}

// OpenPath loads exactly path (a file path or a soname).
func OpenPath(path string) (*Library, error) {
	h, err := dlopen(path)
	if err != nil {
		return nil, err
	}
	return &Library{Path: path, Spec: Spec{Name: path}, handle: h}, nil
}

// Symbol returns the address of name, or an error naming the symbol and the
// library (an older library lacks newer symbols; callers gate optional ones
// on the library's version and use Has).
func (l *Library) Symbol(name string) (unsafe.Pointer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle == nil {
		return nil, fmt.Errorf("dynload: symbol %s: %s is closed", name, l.Path)
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var buf [errLen]C.char
	p := C.fb_dlsym(l.handle, cs, &buf[0], errLen)
	if p == nil {
		msg := C.GoString(&buf[0])
		if msg == "" {
			msg = "symbol resolves to NULL"
		}
		return nil, fmt.Errorf("dynload: symbol %s not in %s: %s", name, l.Path, msg)
	}
	return p, nil
}

// Has reports whether name is defined in the library.
func (l *Library) Has(name string) bool {
	_, err := l.Symbol(name)
	return err == nil
}

// Close releases the handle; later Symbol calls fail. Function pointers
// taken from the library must not be called after Close.
func (l *Library) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle == nil {
		return nil
	}
	var buf [errLen]C.char
	rc := C.fb_dlclose(l.handle, &buf[0], errLen)
	l.handle = nil
	if rc != 0 {
		return fmt.Errorf("dynload: close %s: %s", l.Path, C.GoString(&buf[0]))
	}
	return nil
}

func dlopen(path string) (unsafe.Pointer, error) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var buf [errLen]C.char
	h := C.fb_dlopen(cs, &buf[0], errLen)
	if h == nil {
		return nil, errors.New(C.GoString(&buf[0]))
	}
	return h, nil
}
