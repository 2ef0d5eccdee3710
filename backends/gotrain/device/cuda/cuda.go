//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
)

// elemBytes is the size of a float32 element: scratch, staging and fp32 buffers.
const elemBytes = 4

// Extras is the device memory the cuda device holds beyond the tracked buffers,
// in bytes, so that the tracker's figures stay comparable with the cpu device's
// and nothing is hidden.
type Extras struct {
	// Arena is the caching allocator: Reserved − the tracked bytes is its slack
	// (rounding, free blocks kept for reuse, scratch).
	Arena ArenaStats `json:"arena"`
	// Slack is Arena.Reserved minus the tracked bytes now.
	Slack int64 `json:"slack_bytes"`
	// Workspace is cuBLAS's workspace, taken from the arena.
	Workspace int64 `json:"cublas_workspace_bytes"`
	// Scratch is the device scratch of the ops (token ids, reduction partials),
	// taken from the arena.
	Scratch int64 `json:"scratch_bytes"`
	// Context is the device memory in use when the device was opened, before its
	// first allocation: the CUDA context, the loaded kernels, cuBLAS's handle,
	// and whatever other processes hold on the GPU.
	Context int64 `json:"context_bytes"`
	// DeviceUsed is total − free from cuMemGetInfo now: everything on the GPU;
	// PeakDeviceUsed its largest value seen at a Sync (once per training step),
	// a sampled stand-in for NVML's peak.
	DeviceUsed     int64 `json:"device_used_bytes"`
	PeakDeviceUsed int64 `json:"peak_device_used_bytes"`
}

// Device is a GPU. Its methods are safe for concurrent use as device.Device
// requires; ops are issued in call order on the compute stream.
type Device struct {
	name string
	opts Options
	info Info

	cdev C.CUdevice
	ctx  C.CUcontext
	// compute runs every op; comm is the communication stream (Streams).
	compute, comm C.CUstream
	blas          C.cublasHandle_t
	workspace     uint64
	context       int64

	tr *device.Tracker
	k  *kernelSet

	// mu guards the arena, the scratch and the error; it is held while an op is
	// issued, so ops from several goroutines reach the stream one at a time.
	mu      sync.Mutex
	arena   *arena
	scratch map[string]scratch
	err     error
	closed  bool
	// peakUsed is the largest total − free of cuMemGetInfo seen at a Sync.
	peakUsed int64
	// rope caches the cos/sin tables in scratch for the last RoPE shape.
	rope device.RoPEShape
	// deferred are blocks freed by FreeAfter whose event has not completed yet.
	deferred []deferredFree

	// prof holds the op timings when Options.Profile is set (nil otherwise).
	prof *profiler
	// launches counts the kernels and cuBLAS calls issued (Launches).
	launches atomic.Int64

	// launchHook, when set (tests), sees every launch before it is issued.
	launchHook func(k *kernels.Kernel, args []arg)
}

// scratch is one named piece of the device's scratch memory.
type scratch struct {
	ptr   uint64
	bytes int64
}

// driverSegments allocates the arena's segments with cuMemAlloc.
type driverSegments struct{ d *Device }

func (s driverSegments) allocSegment(bytes int64) (uint64, error) {
	var p C.CUdeviceptr
	r := int(C.fsdp_mem_alloc(s.d.ctx, &p, C.size_t(bytes)))
	if r == cudaErrorOutOfMemory {
		return 0, fmt.Errorf("cuMemAlloc of a %d-byte segment: %w", bytes, errDriverOOM)
	}
	return uint64(p), cuErr("cuMemAlloc_v2", r)
}

func (s driverSegments) freeSegment(ptr uint64) error {
	return cuErr("cuMemFree_v2", int(C.fsdp_mem_free(s.d.ctx, C.CUdeviceptr(ptr))))
}

// New opens GPU o.Ordinal: it binds the libraries (once per process), retains the
// device's primary context, creates the two streams, the cuBLAS handle and its
// workspace, and loads the kernels. Without a usable GPU the error wraps
// ErrNoDevice and says why.
func New(o Options) (*Device, error) {
	libs, err := bind()
	if err != nil {
		return nil, err
	}
	if o.Ordinal < 0 || o.Ordinal >= libs.devices {
		return nil, fmt.Errorf("%w: GPU %d asked for, the driver lists %d (set LOCAL_RANK or CUDA_VISIBLE_DEVICES)",
			ErrNoDevice, o.Ordinal, libs.devices)
	}
	if o.LimitBytes < 0 || o.WorkspaceBytes < 0 || (o.GEMM != GEMMFP32 && o.GEMM != GEMMBF16) {
		return nil, fmt.Errorf("cuda: options %+v: limit and workspace must not be negative, GEMM one of the GEMM modes", o)
	}
	if o.WorkspaceBytes == 0 {
		o.WorkspaceBytes = DefaultWorkspaceBytes
	}
	d := &Device{name: fmt.Sprintf("cuda:%d", o.Ordinal), opts: o, tr: device.NewTracker(o.LimitBytes),
		scratch: map[string]scratch{}}
	d.arena = newArena(driverSegments{d})
	if o.Profile {
		d.prof = &profiler{done: map[[2]string]*OpTime{}}
	}

	var name [256]C.char
	var total C.size_t
	var major, minor C.int
	var cdev C.CUdevice
	var ctx C.CUcontext
	if r := int(C.fsdp_device_open(C.int(o.Ordinal), &cdev, &ctx, &name[0], C.int(len(name)), &total, &major, &minor)); r != 0 {
		return nil, fmt.Errorf("%w: open GPU %d: %w", ErrNoDevice, o.Ordinal, cuErr("cuDevicePrimaryCtxRetain", r))
	}
	d.cdev, d.ctx = cdev, ctx
	d.info = Info{
		GPU: C.GoString(&name[0]), ComputeCapability: fmt.Sprintf("%d.%d", major, minor), MemoryBytes: int64(total),
		CUDA:    fmt.Sprintf("%d.%d", libs.driverVersion/1000, libs.driverVersion%1000/10),
		LibCUDA: libs.cuda.Path, LibCUBLAS: libs.cublas.Path, Driver: driverVersion(),
	}
	if err := d.open(); err != nil {
		d.release()
		return nil, fmt.Errorf("cuda: open GPU %d (%s): %w", o.Ordinal, d.info.GPU, err)
	}
	return d, nil
}

// open creates what New needs beyond the context; release undoes any part of it.
func (d *Device) open() error {
	var free, total C.size_t
	if err := cuErr("cuMemGetInfo_v2", int(C.fsdp_mem_info(d.ctx, &free, &total))); err != nil {
		return err
	}
	d.context = int64(total) - int64(free)
	for _, s := range []*C.CUstream{&d.compute, &d.comm} {
		var st C.CUstream // cgo refuses a pointer into d, which holds Go pointers
		if err := cuErr("cuStreamCreate", int(C.fsdp_stream_create(d.ctx, &st))); err != nil {
			return err
		}
		*s = st
	}
	ws, err := d.arena.alloc(d.opts.WorkspaceBytes)
	if err != nil {
		if errors.Is(err, errDriverOOM) {
			err = fmt.Errorf("%w: %w", err, device.ErrOutOfMemory)
		}
		return fmt.Errorf("the cuBLAS workspace of %d bytes: %w", d.opts.WorkspaceBytes, err)
	}
	d.workspace = ws
	var version C.int
	var h C.cublasHandle_t
	if err := blasErr("cublasCreate_v2", int(C.fsdp_blas_create(d.ctx, &h, d.compute,
		C.CUdeviceptr(ws), C.size_t(d.opts.WorkspaceBytes), &version))); err != nil {
		return err
	}
	d.blas = h
	v := int(version)
	d.info.CUBLAS = fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	if v < 10000 { // cuBLAS before 11 counted major·1000 + minor·100 + patch
		d.info.CUBLAS = fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
	}
	d.k, err = loadKernels(d)
	return err
}

// release frees everything open created, in reverse order, ignoring errors: it
// runs on failure paths and at Close after the errors were collected.
func (d *Device) release() {
	d.releaseProfiler()
	if d.k != nil {
		d.k.unload(d)
		d.k = nil
	}
	if d.blas != nil {
		C.fsdp_blas_destroy(d.ctx, d.blas)
		d.blas = nil
	}
	d.dropDeferred()
	for _, s := range []*C.CUstream{&d.compute, &d.comm} {
		if *s != nil {
			C.fsdp_stream_destroy(d.ctx, *s)
			*s = nil
		}
	}
	_ = d.arena.close()
	if d.ctx != nil {
		C.fsdp_device_close(d.cdev, d.ctx)
		d.ctx = nil
	}
}

// Close waits for the device, frees all its memory and releases the context.
// Buffers must not be used afterwards; a second Close does nothing.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	err := d.syncLocked()
	d.release()
	return err
}

// Info describes the GPU and the libraries.
func (d *Device) Info() Info { return d.info }

// Name is "cuda:<ordinal>".
func (d *Device) Name() string { return d.name }

// Extras reports the memory held beyond the tracked buffers.
func (d *Device) Extras() Extras {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := Extras{Arena: d.arena.stats, Workspace: d.opts.WorkspaceBytes, Context: d.context, PeakDeviceUsed: d.peakUsed}
	e.Slack = e.Arena.Reserved - d.tr.Stats().Total
	for _, s := range d.scratch {
		e.Scratch += s.bytes
	}
	var free, total C.size_t
	if !d.closed && C.fsdp_mem_info(d.ctx, &free, &total) == 0 {
		e.DeviceUsed = int64(total) - int64(free)
		e.PeakDeviceUsed = max(e.PeakDeviceUsed, e.DeviceUsed)
	}
	return e
}

// allocation is what Alloc handed out; its views share it.
type allocation struct {
	ptr   uint64
	bytes int64
	cat   device.Category
	dt    device.DType
	freed atomic.Bool
}

// buffer is a cuda buffer or a view of one: n elements of a.dt at ptr.
type buffer struct {
	d    *Device
	ptr  uint64
	n    int
	a    *allocation
	view bool
}

// Len, Category, Device and Slice are device.Buffer's.
func (b *buffer) Len() int                  { return b.n }
func (b *buffer) Category() device.Category { return b.a.cat }
func (b *buffer) Device() device.Device     { return b.d }

func (b *buffer) Slice(off, n int) device.Buffer {
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("cuda: Slice(%d, %d) of a buffer of %d elements", off, n, b.n))
	}
	return &buffer{d: b.d, ptr: b.ptr + uint64(off)*uint64(b.a.dt.Size()), n: n, a: b.a, view: true}
}

// DevicePointer is the device address of b's first element (NCCL's buffers).
func (b *buffer) DevicePointer() uintptr { return uintptr(b.ptr) }

// Pointer returns the device address of b's first element, for code that hands
// buffers to other CUDA libraries (NCCL). It panics for a buffer of another device.
func Pointer(b device.Buffer) uintptr {
	x, ok := b.(*buffer)
	if !ok {
		panic(fmt.Sprintf("cuda: Pointer of %T, not a cuda buffer", b))
	}
	return uintptr(x.ptr)
}

// Alloc returns a zeroed buffer of n float32, charging the tracker n·4 bytes of cat.
func (d *Device) Alloc(n int, cat device.Category) (device.Buffer, error) {
	return d.AllocDType(n, device.F32, cat)
}

// AllocDType returns a zeroed buffer of n elements of type t, charging the
// tracker n·t.Size() bytes of cat.
func (d *Device) AllocDType(n int, t device.DType, cat device.Category) (device.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("%s: allocate %d elements of %v: negative length", d.name, n, cat)
	}
	if t != device.F32 && t != device.BF16 {
		return nil, fmt.Errorf("%s: allocate %d elements of %v: unknown dtype", d.name, n, t)
	}
	bytes := int64(n) * t.Size()
	if err := d.tr.Reserve(bytes, cat); err != nil {
		return nil, fmt.Errorf("%s: %w", d.name, err)
	}
	a := &allocation{bytes: bytes, cat: cat, dt: t}
	if n > 0 {
		d.mu.Lock()
		ptr, err := d.allocLocked(bytes)
		if err == nil {
			a.ptr = ptr
			// The arena's blocks are 512-byte aligned and sized, so the words
			// past an odd bf16 count belong to this block.
			words := (bytes + 3) / 4
			// A memset on the stream like Zero's: counted in Launches, since a
			// step's activations are mostly fresh allocations, each a piece of
			// work for the GPU's front end.
			d.countWork()
			d.issue("Alloc", func() int {
				return int(C.fsdp_memset32(d.ctx, C.CUdeviceptr(ptr), 0, C.size_t(words), d.compute))
			})
		}
		d.mu.Unlock()
		if err != nil {
			d.tr.Release(bytes, cat)
			if errors.Is(err, errDriverOOM) {
				return nil, fmt.Errorf("%s: allocate %d bytes of %v: %v: %w", d.name, bytes, cat, err, device.ErrOutOfMemory)
			}
			return nil, fmt.Errorf("%s: allocate %d bytes of %v: %w", d.name, bytes, cat, err)
		}
	}
	return &buffer{d: d, ptr: a.ptr, n: n, a: a}, nil
}

// Free returns a buffer's memory to the arena. Work already issued on the compute
// stream that uses it still runs before any later use of the memory (one stream);
// a buffer used on the comm stream is freed only after the compute stream waited
// for it, or with FreeAfter (Streams).
func (d *Device) Free(b device.Buffer) {
	x := d.buf("Free", b)
	if x.view {
		panic(fmt.Sprintf("%s: Free of a view (Slice): free the buffer it was cut from", d.name))
	}
	if !x.a.freed.CompareAndSwap(false, true) {
		panic(fmt.Sprintf("%s: Free of a buffer freed already", d.name))
	}
	if x.a.ptr != 0 {
		d.mu.Lock()
		var err error
		if !d.closed { // Close gave every segment back already
			err = d.arena.free(x.a.ptr)
		}
		d.mu.Unlock()
		if err != nil {
			panic(fmt.Sprintf("%s: Free: %v", d.name, err))
		}
	}
	d.tr.Release(x.a.bytes, x.a.cat)
}

// Memory reports the tracked bytes, the same figures the cpu device reports for
// the same allocations.
func (d *Device) Memory() device.Stats { return d.tr.Stats() }

// ResetPeak sets every tracked peak, and the arena's reserved peak, to the current figure.
func (d *Device) ResetPeak() {
	d.tr.ResetPeak()
	d.mu.Lock()
	d.arena.stats.PeakReserved = d.arena.stats.Reserved
	d.mu.Unlock()
}

// Sync waits for both streams and returns the first device failure, if any; the
// failure stays (the device is unusable afterwards).
func (d *Device) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.syncLocked()
}

func (d *Device) syncLocked() error {
	if d.closed && d.ctx == nil {
		return d.errLocked()
	}
	d.issue("Sync compute stream", func() int { return int(C.fsdp_stream_sync(d.ctx, d.compute)) })
	d.issue("Sync comm stream", func() int { return int(C.fsdp_stream_sync(d.ctx, d.comm)) })
	var free, total C.size_t
	if d.err == nil && C.fsdp_mem_info(d.ctx, &free, &total) == 0 {
		d.peakUsed = max(d.peakUsed, int64(total)-int64(free))
	}
	return d.errLocked()
}

func (d *Device) errLocked() error {
	if d.err != nil {
		return fmt.Errorf("%s: %w", d.name, d.err)
	}
	return nil
}

// issue runs one driver call unless the device has failed already, and makes a
// failure sticky. d.mu is held.
func (d *Device) issue(what string, call func() int) {
	if d.err != nil {
		return
	}
	if d.closed && d.ctx == nil {
		d.err = fmt.Errorf("%s after Close", what)
		return
	}
	if r := call(); r != 0 {
		d.err = fmt.Errorf("%s: %w", what, cuErr("driver", r))
	}
}

// issueBLAS is issue for a cuBLAS call.
func (d *Device) issueBLAS(what string, call func() int) {
	if d.err != nil {
		return
	}
	d.countWork()
	if s := call(); s != 0 {
		d.err = fmt.Errorf("%s: %w", what, blasErr("cuBLAS", s))
	}
}

// buf checks that b is a live buffer of d.
func (d *Device) buf(op string, b device.Buffer) *buffer {
	x, ok := b.(*buffer)
	if !ok || x.d != d {
		panic(fmt.Sprintf("%s: %s: buffer %T does not belong to this device", d.name, op, b))
	}
	if x.a.freed.Load() {
		panic(fmt.Sprintf("%s: %s: buffer used after Free", d.name, op))
	}
	return x
}

// get returns b after checking it is d's and holds want elements.
func (d *Device) get(op string, b device.Buffer, want int) *buffer {
	x := d.buf(op, b)
	if x.n != want {
		panic(fmt.Sprintf("%s: %s: buffer of %d elements, want %d", d.name, op, x.n, want))
	}
	return x
}

// CopyFromHost copies src into dst on the compute stream; src may be reused when it returns.
func (d *Device) CopyFromHost(dst device.Buffer, src []float32) {
	x := d.get("CopyFromHost", dst, len(src))
	if len(src) == 0 {
		return
	}
	host, bytes := unsafe.Pointer(&src[0]), len(src)*elemBytes
	if x.a.dt == device.BF16 {
		enc := toBF16(src)
		host, bytes = unsafe.Pointer(&enc[0]), 2*len(enc)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// From pageable memory the driver stages the source before it returns, so src
	// may change afterwards while the copy stays ordered on the stream.
	d.issue("CopyFromHost", func() int {
		return int(C.fsdp_htod(d.ctx, C.CUdeviceptr(x.ptr), host, C.size_t(bytes), d.compute))
	})
}

// CopyToHost copies src into dst after the compute stream's work and returns when dst holds it.
func (d *Device) CopyToHost(dst []float32, src device.Buffer) {
	x := d.get("CopyToHost", src, len(dst))
	if len(dst) == 0 {
		return
	}
	if x.a.dt == device.BF16 {
		enc := make([]uint16, len(dst))
		d.mu.Lock()
		d.issue("CopyToHost", func() int {
			return int(C.fsdp_dtoh(d.ctx, unsafe.Pointer(&enc[0]), C.CUdeviceptr(x.ptr), C.size_t(2*len(enc)), d.compute))
		})
		d.mu.Unlock()
		for i, b := range enc {
			dst[i] = device.FromBF16Bits(b)
		}
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.issue("CopyToHost", func() int {
		return int(C.fsdp_dtoh(d.ctx, unsafe.Pointer(&dst[0]), C.CUdeviceptr(x.ptr), C.size_t(len(dst)*elemBytes), d.compute))
	})
}

// Copy copies src into dst; overlapping views of one allocation go through scratch
// memory, since cuMemcpy leaves overlapping copies undefined.
func (d *Device) Copy(dst, src device.Buffer) {
	s := d.buf("Copy", src)
	t := d.get("Copy", dst, s.n)
	device.CheckDTypes(d.name, "Copy", nil, dst, src)
	if s.n == 0 || s.ptr == t.ptr {
		return
	}
	bytes := uint64(s.n) * uint64(s.a.dt.Size())
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostCopy(s.a.dt, s.n) })()
	from := s.ptr
	if s.a == t.a && s.ptr < t.ptr+bytes && t.ptr < s.ptr+bytes {
		tmp, ok := d.scratchLocked("copy", int64(bytes))
		if !ok {
			return
		}
		d.issue("Copy (to scratch)", func() int {
			return int(C.fsdp_dtod(d.ctx, C.CUdeviceptr(tmp), C.CUdeviceptr(s.ptr), C.size_t(bytes), d.compute))
		})
		from = tmp
		d.countWork()
	}
	d.countWork()
	d.issue("Copy", func() int {
		return int(C.fsdp_dtod(d.ctx, C.CUdeviceptr(t.ptr), C.CUdeviceptr(from), C.size_t(bytes), d.compute))
	})
}

// Zero sets b to 0 with cuMemsetD32 on the compute stream (bf16: kernels.ZeroBF16).
func (d *Device) Zero(b device.Buffer) {
	x := d.buf("Zero", b)
	if x.n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostZero(x.a.dt, x.n) })()
	if x.a.dt == device.BF16 {
		d.launch(&kernels.ZeroBF16, grid{kernels.GridStride(int64(x.n)), 1, 1}, 0, ptrArg(x), i64Arg(x.n))
		return
	}
	d.countWork()
	d.issue("Zero", func() int {
		return int(C.fsdp_memset32(d.ctx, C.CUdeviceptr(x.ptr), 0, C.size_t(x.n), d.compute))
	})
}

// scratchLocked returns named scratch memory of at least bytes, growing it from
// the arena; the previous piece goes back to the arena, which is safe on one
// stream: work already issued that reads it runs before any later reuse. It
// returns false after recording an error when the arena cannot grow. d.mu is held.
func (d *Device) scratchLocked(name string, bytes int64) (uint64, bool) {
	s := d.scratch[name]
	if s.bytes >= bytes {
		return s.ptr, true
	}
	if s.ptr != 0 {
		_ = d.arena.free(s.ptr)
		delete(d.scratch, name)
	}
	size := max(roundUp(bytes, blockAlign), 4096)
	ptr, err := d.arena.alloc(size)
	if err != nil {
		if d.err == nil {
			d.err = fmt.Errorf("scratch memory for %s (%d bytes): %w", name, size, err)
		}
		return 0, false
	}
	d.scratch[name] = scratch{ptr: ptr, bytes: size}
	return ptr, true
}

// driverVersion reads the kernel module's version from the first line of
// /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module
// 535.104.05  Sat Aug 19 …", or "… Open Kernel Module for x86_64  580.65.06 …").
func driverVersion() string {
	b, err := os.ReadFile("/proc/driver/nvidia/version")
	if err != nil {
		return ""
	}
	return parseDriverVersion(string(b))
}

func parseDriverVersion(text string) string {
	first, _, _ := strings.Cut(text, "\n")
	return driverVersionRE.FindString(first)
}

var driverVersionRE = regexp.MustCompile(`\b\d{3,}\.\d+(\.\d+)?\b`)
