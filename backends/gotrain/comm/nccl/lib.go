//go:build cgo

package nccl

// #include <stdint.h>
// #include <stddef.h>
//
// typedef struct { char internal[128]; } fbUniqueId;
// typedef int fbResult;
//
// static fbResult fb_getVersion(void* f, int* v) { return ((fbResult (*)(int*))f)(v); }
// static fbResult fb_getUniqueId(void* f, fbUniqueId* id) { return ((fbResult (*)(fbUniqueId*))f)(id); }
// static fbResult fb_commInitRank(void* f, void** comm, int nranks, const fbUniqueId* id, int rank) {
//   return ((fbResult (*)(void**, int, fbUniqueId, int))f)(comm, nranks, *id, rank);
// }
// static fbResult fb_commCount(void* f, void* comm, int* n) { return ((fbResult (*)(void*, int*))f)(comm, n); }
// static fbResult fb_commGetAsyncError(void* f, void* comm, fbResult* e) { return ((fbResult (*)(void*, fbResult*))f)(comm, e); }
// static const char* fb_getErrorString(void* f, fbResult r) { return ((const char* (*)(fbResult))f)(r); }
// static const char* fb_getLastError(void* f, void* comm) { return ((const char* (*)(void*))f)(comm); }
// static int fb_flag(void* f) { return ((int (*)(void))f)(); }
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/dynload"
)

// NCCL's enums, from nccl.h.
const (
	ncclSuccess         = 0
	ncclInvalidUsage    = 5
	ncclFloat32         = 7
	ncclBfloat16        = 9 // bf16 collectives, with the cuda device
	ncclSum             = 0
	ncclAvg             = 4
	ncclSplitNoColor    = -1
	uniqueIDBytes       = 128
	versionCommSplit    = 21801 // ncclCommSplit appeared in 2.18.1
	versionMin          = 21000 // ncclAvg appeared in 2.10.0
	versionMultiRankGPU = 23000 // two ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE=1)
)

// Library is a loaded libnccl with its entry points.
type Library struct {
	// Path is the file or soname that loaded.
	Path string
	// Version is ncclGetVersion's code (major·10000 + minor·100 + patch).
	Version int
	// HostMemory is true for a library whose "device pointers" are host memory
	// (the test fake, which exports fsdpbenchFakeNCCL): the communicator then
	// accepts the cpu device's buffers and host slices directly.
	HostMemory bool

	lib *dynload.Library
	getVersion, getUniqueID, commInitRank, commCount, commUserRank,
	commGetAsyncError, commAbort, commDestroy, getErrorString,
	allGather, reduceScatter, allReduce, broadcast unsafe.Pointer
	// Optional: nil when the library is too old or lacks them.
	commSplit, getLastError unsafe.Pointer
}

var (
	loadMu   sync.Mutex
	loaded   = map[string]*Library{}
	loadErrs = map[string]error{}
)

// Load opens libnccl.so.2 through dynload's search (FSDPBENCH_LIBNCCL, the
// loader's path, site-packages/nvidia/nccl/lib) once per process and search
// result. A missing library is an error listing every place tried.
func Load() (*Library, error) {
	cands := dynload.Candidates(dynload.NCCL)
	key := fmt.Sprint(cands)
	loadMu.Lock()
	defer loadMu.Unlock()
	if l, ok := loaded[key]; ok {
		return l, nil
	}
	if err, ok := loadErrs[key]; ok {
		return nil, err
	}
	l, err := open()
	if err != nil {
		err = fmt.Errorf("nccl: %w", err)
		loadErrs[key] = err
		return nil, err
	}
	loaded[key] = l
	return l, nil
}

func open() (*Library, error) {
	dl, err := dynload.Open(dynload.NCCL)
	if err != nil {
		return nil, err
	}
	l := &Library{Path: dl.Path, lib: dl}
	for _, s := range []struct {
		name string
		p    *unsafe.Pointer
	}{
		{"ncclGetVersion", &l.getVersion}, {"ncclGetUniqueId", &l.getUniqueID},
		{"ncclCommInitRank", &l.commInitRank}, {"ncclCommCount", &l.commCount},
		{"ncclCommUserRank", &l.commUserRank}, {"ncclCommGetAsyncError", &l.commGetAsyncError},
		{"ncclCommAbort", &l.commAbort}, {"ncclCommDestroy", &l.commDestroy},
		{"ncclGetErrorString", &l.getErrorString}, {"ncclAllGather", &l.allGather},
		{"ncclReduceScatter", &l.reduceScatter}, {"ncclAllReduce", &l.allReduce},
		{"ncclBroadcast", &l.broadcast},
	} {
		if *s.p, err = dl.Symbol(s.name); err != nil {
			dl.Close()
			return nil, fmt.Errorf("%s is not a usable NCCL: %w", dl.Path, err)
		}
	}
	var v C.int
	if rc := C.fb_getVersion(l.getVersion, &v); rc != ncclSuccess {
		dl.Close()
		return nil, fmt.Errorf("%s: ncclGetVersion failed with code %d", dl.Path, int(rc))
	}
	l.Version = int(v)
	if l.Version < versionMin {
		dl.Close()
		return nil, fmt.Errorf("%s is NCCL %s; the trainer needs 2.10 or newer (ncclAvg)", dl.Path, l.VersionString())
	}
	if l.Version >= versionCommSplit {
		l.commSplit, _ = dl.Symbol("ncclCommSplit")
	}
	l.getLastError, _ = dl.Symbol("ncclGetLastError")
	if p, err := dl.Symbol("fsdpbenchFakeNCCL"); err == nil {
		l.HostMemory = C.fb_flag(p) == 1
	}
	return l, nil
}

// VersionString is the version as "2.27.3". NCCL before 2.9 encoded it as
// major·1000 + minor·100 + patch.
func (l *Library) VersionString() string {
	v := l.Version
	if v < 10000 {
		return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

// HasSplit reports whether ncclCommSplit is used (NCCL ≥ 2.18.1 that exports it);
// otherwise Split builds each new group from a fresh unique id.
func (l *Library) HasSplit() bool { return l.commSplit != nil }

// errorString is NCCL's text for code rc, with the communicator's last error
// when the library has ncclGetLastError.
func (l *Library) errorString(rc C.fbResult, comm unsafe.Pointer) string {
	msg := fmt.Sprintf("code %d", int(rc))
	if s := C.fb_getErrorString(l.getErrorString, rc); s != nil {
		msg = C.GoString(s) + " (" + msg + ")"
	}
	if l.getLastError != nil {
		if s := C.fb_getLastError(l.getLastError, comm); s != nil && C.GoString(s) != "" {
			msg += ": " + C.GoString(s)
		}
	}
	return msg
}

// uniqueID asks NCCL for a new unique id (on one rank, then shared).
func (l *Library) uniqueID() ([uniqueIDBytes]byte, error) {
	var id C.fbUniqueId
	var out [uniqueIDBytes]byte
	if rc := C.fb_getUniqueId(l.getUniqueID, &id); rc != ncclSuccess {
		return out, fmt.Errorf("ncclGetUniqueId: %s", l.errorString(rc, nil))
	}
	copy(out[:], C.GoBytes(unsafe.Pointer(&id.internal[0]), uniqueIDBytes))
	return out, nil
}

// initRank is ncclCommInitRank. It blocks until every rank has joined.
func (l *Library) initRank(nranks, rank int, id [uniqueIDBytes]byte) (unsafe.Pointer, error) {
	var cid C.fbUniqueId
	for i, b := range id {
		cid.internal[i] = C.char(b)
	}
	var comm unsafe.Pointer
	if rc := C.fb_commInitRank(l.commInitRank, &comm, C.int(nranks), &cid, C.int(rank)); rc != ncclSuccess {
		msg := fmt.Sprintf("ncclCommInitRank (rank %d of %d): %s", rank, nranks, l.errorString(rc, nil))
		if rc == ncclInvalidUsage && !l.HostMemory && l.Version < versionMultiRankGPU {
			msg += fmt.Sprintf("; NCCL %s refuses two ranks on one GPU (2.30 allows it with NCCL_MULTI_RANK_GPU_ENABLE=1): give each rank its own GPU", l.VersionString())
		}
		return nil, fmt.Errorf("%s", msg)
	}
	return comm, nil
}

// countRank is ncclCommCount and ncclCommUserRank.
func (l *Library) countRank(comm unsafe.Pointer) (n, rank int, err error) {
	var cn, cr C.int
	if rc := C.fb_commCount(l.commCount, comm, &cn); rc != ncclSuccess {
		return 0, 0, fmt.Errorf("ncclCommCount: %s", l.errorString(rc, comm))
	}
	if rc := C.fb_commCount(l.commUserRank, comm, &cr); rc != ncclSuccess {
		return 0, 0, fmt.Errorf("ncclCommUserRank: %s", l.errorString(rc, comm))
	}
	return int(cn), int(cr), nil
}

// asyncError is ncclCommGetAsyncError: ncclSuccess, or the error NCCL hit in
// the background (a failed peer, a network error).
func (l *Library) asyncError(comm unsafe.Pointer) C.fbResult {
	var e C.fbResult
	if rc := C.fb_commGetAsyncError(l.commGetAsyncError, comm, &e); rc != ncclSuccess {
		return rc
	}
	return e
}
