package comm

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The shared-memory segment of one shm communicator, all little-endian, in one file
// that every rank of the group maps:
//
//	0      header (segHeaderBytes): magic, version, size, slot bytes, id hash, and
//	       the abort record (state, origin, reporter, reason)
//	4096   one control block per rank (ctlBytes each): the written and read
//	       round counters (futex words) with their sleeper counts, joined, and
//	       the round headers of its shmDepth buffers (wire.go's header, 32 bytes
//	       each)
//	data   shmDepth buffers of slotBytes per rank, page aligned: a rank writes
//	       only into its own buffers, and reads everyone's
//	arena  arenaBytes, page aligned, for buffers the ranks share (shmarena.go);
//	       its pages are reserved only when first handed out
//
// Liveness rides on open-file-description locks (F_OFD_SETLK): rank r holds a write
// lock on byte lockBase+r of the file for as long as its communicator is open. The
// kernel drops it when the descriptor closes, which a process that dies does at
// exit, before it is even reaped, so "rank r's byte is unlocked" means rank r is
// gone, across processes, threads and PID namespaces alike.
const (
	segMagic       = 0x314d_4853_5044_5346 // "FSDPSHM1"
	segVersion     = 3
	segHeaderBytes = 4096
	ctlBytes       = 512
	// shmDepth is how many rounds a rank may run ahead of the slowest reader:
	// each rank has this many buffers, used in turn. Depth, more than the size
	// of a round, is what keeps ranks streaming on a loaded machine, where a
	// peer is often off its core for a while.
	shmDepth = 8
	// segPrefix starts every segment's file name, so stale ones can be found.
	segPrefix = "fsdpbench-comm-"
	// maxShmRanks bounds a shared-memory group: more ranks than this on one node
	// is not a machine that exists.
	maxShmRanks = 1024
	// maxReason bounds the abort record's reason text.
	maxReason = 2048
	// lockBase is where the liveness lock bytes start, far past the data (POSIX
	// locks may lie beyond the end of a file).
	lockBase = 1 << 40
	// DefaultShmDir is where segments are created when Options.ShmDir is empty.
	DefaultShmDir = "/dev/shm"
)

// Header offsets.
const (
	hMagic       = 0
	hVersion     = 8
	hSize        = 12
	hSlotBytes   = 16
	hIDHash      = 24
	hArenaBytes  = 32
	hAbortState  = 64 // 0 none, 1 being written, 2 posted
	hAbortOrigin = 68
	hAbortReport = 72
	hAbortLen    = 76
	hAbortReason = 80
)

// Control block offsets; the counters sit on their own cache lines.
const (
	cWritten      = 0
	cWrittenSleep = 4
	cRead         = 64
	cReadSleep    = 68
	cJoined       = 128
	cJoinedSleep  = 132
	cHeaders      = 160 // shmDepth round headers of headerLen bytes
)

// Abort states.
const (
	abortNone    = 0
	abortWriting = 1
	abortPosted  = 2
)

// segment is one rank's mapping of a group's segment.
type segment struct {
	path      string // the file while it is linked; "" once unlinked
	fd        int
	mem       []byte
	size      int
	slotBytes int
	dataOff   int
	arenaOff  int
	arena     []float32 // the shared arena, nil when there is none
}

// segLayout places the parts of a segment: the rounds' buffers from dataOff, the
// arena from arenaOff, total bytes in all.
func segLayout(size, slotBytes, arenaBytes int) (dataOff, arenaOff, total int) {
	dataOff = roundUp(segHeaderBytes+size*ctlBytes, 4096)
	arenaOff = roundUp(dataOff+size*shmDepth*slotBytes, 4096)
	return dataOff, arenaOff, arenaOff + arenaBytes
}

// mapArena sets s.arena to the arena's part of the mapping.
func (s *segment) mapArena(arenaBytes int) {
	s.arena = nil
	if arenaBytes > 0 {
		s.arena = unsafe.Slice((*float32)(unsafe.Pointer(&s.mem[s.arenaOff])), arenaBytes/4)
	}
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// shmMaxRoundBytes caps a round: rounds that a peer reads while they are still in
// the writer's cache beat larger ones (the all-gather benchmark at ws 2 moved
// about 1.4× more with 64–256 KiB rounds than with 1 MiB on the CI machine).
const shmMaxRoundBytes = 256 << 10

// slotBytesFor is the size of one buffer of a rank: the round unit (ChunkBytes, at
// most shmMaxRoundBytes), at least one element per rank (reduce-scatter splits a
// round by rank), and cache aligned.
func slotBytesFor(chunkBytes, size int) int {
	return roundUp(max(min(chunkBytes, shmMaxRoundBytes), 4*size), 64)
}

func (s *segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }

func (s *segment) ctl(r, field int) *uint32 { return s.u32(segHeaderBytes + r*ctlBytes + field) }

// roundHeader is the header of rank r's buffer b.
func (s *segment) roundHeader(r, b int) []byte {
	off := segHeaderBytes + r*ctlBytes + cHeaders + b*headerLen
	return s.mem[off : off+headerLen]
}

// slot is rank r's buffer b as float32.
func (s *segment) slot(r, b int) []float32 {
	off := s.dataOff + (shmDepth*r+b)*s.slotBytes
	return unsafe.Slice((*float32)(unsafe.Pointer(&s.mem[off])), s.slotBytes/4)
}

// publish stores v into a counter and wakes its sleepers, if any. The sleeper count
// is read after the store and incremented by a waiter before its last look at the
// counter, so no wake-up is lost (and futex waits time out anyway).
func publish(word, sleepers *uint32, v uint32) {
	atomic.StoreUint32(word, v)
	if atomic.LoadUint32(sleepers) != 0 {
		futexWake(word)
	}
}

// reached compares round counters modulo 2^32: rounds in flight are never 2^31
// apart.
func reached(v, target uint32) bool { return int32(v-target) >= 0 }

const (
	futexWaitOp = 0 // FUTEX_WAIT, not _PRIVATE: the word is shared between processes
	futexWakeOp = 1
)

func futexWait(word *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(word *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWakeOp, math.MaxInt32, 0, 0, 0)
}

// wakeAll wakes every waiter on every counter (an abort, a cancellation, Close).
func (s *segment) wakeAll() {
	for r := range s.size {
		futexWake(s.ctl(r, cWritten))
		futexWake(s.ctl(r, cRead))
		futexWake(s.ctl(r, cJoined))
	}
}

// lockByte takes (F_OFD_SETLK) or tests (F_OFD_GETLK) the liveness byte of rank r.
func lockByte(fd, cmd, r, n int) (unix.Flock_t, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: lockBase + int64(r), Len: int64(n)}
	err := unix.FcntlFlock(uintptr(fd), cmd, &lk)
	return lk, err
}

// alive reports whether rank r still holds its liveness lock.
func (s *segment) alive(r int) bool {
	lk, err := lockByte(s.fd, unix.F_OFD_GETLK, r, 1)
	return err != nil || lk.Type != unix.F_UNLCK // in doubt, alive: the op timeout still bounds the wait
}

// postAbort records a failure in the segment unless one is there already, and
// wakes everyone. It reports whether this call's record is the one posted.
func (s *segment) postAbort(origin, reporter int, reason string) bool {
	if !atomic.CompareAndSwapUint32(s.u32(hAbortState), abortNone, abortWriting) {
		return false
	}
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	*s.u32(hAbortOrigin) = uint32(origin)
	*s.u32(hAbortReport) = uint32(reporter)
	*s.u32(hAbortLen) = uint32(len(reason))
	copy(s.mem[hAbortReason:], reason)
	atomic.StoreUint32(s.u32(hAbortState), abortPosted)
	s.wakeAll()
	return true
}

// aborted reports whether a failure has been posted or is being posted.
func (s *segment) aborted() bool { return atomic.LoadUint32(s.u32(hAbortState)) != abortNone }

// abortRecord reads the posted failure, waiting briefly for a record being written;
// ok is false when none is complete.
func (s *segment) abortRecord() (origin, reporter int, reason string, ok bool) {
	for range 1000 {
		switch atomic.LoadUint32(s.u32(hAbortState)) {
		case abortNone:
			return 0, 0, "", false
		case abortPosted:
			n := min(int(*s.u32(hAbortLen)), maxReason)
			return int(*s.u32(hAbortOrigin)), int(*s.u32(hAbortReport)), string(s.mem[hAbortReason : hAbortReason+n]), true
		}
		time.Sleep(time.Millisecond) // a writer that died mid-record leaves it at 1
	}
	return 0, 0, "", false
}

// close unmaps the segment and closes the file, which drops this rank's liveness
// lock; a file still linked (a setup that failed) is removed.
func (s *segment) close() error {
	var errs []error
	if s.path != "" {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		s.path = ""
	}
	if s.mem != nil {
		s.arena = nil
		errs = append(errs, unix.Munmap(s.mem))
		s.mem = nil
	}
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
		s.fd = -1
	}
	return errors.Join(errs...)
}

// segName is the file of a group: the group's id, which carries the rendezvous
// table's random ID, made safe for a file name.
func segName(dir, id string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '.'
	}, id)
	return filepath.Join(dir, segPrefix+clean)
}

func idHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// setup describes a segment to open.
type setup struct {
	dir       string
	id        string
	rank      int
	size      int
	slotBytes int
	// arenaBytes is the size of the shared arena (a multiple of 4096; 0: none).
	arenaBytes int
	timeout    time.Duration
	// peerAlive, when set, says whether group rank r is still alive while the
	// segment is being set up (the parent communicator's view), so that a member
	// that dies before it joins fails the setup at once, not at the timeout.
	peerAlive func(r int) bool
	// describe names group rank r in errors.
	describe func(r int) string
}

// openSegment creates (rank 0) or opens (the others) the group's segment, takes
// this rank's liveness lock, and waits until every rank has joined. Rank 0 then
// unlinks the file: from there on the memory lives exactly as long as some rank
// maps it, and nothing is left in the file system however the ranks end. A rank 0
// killed during setup leaves the file behind, with no lock held in it; the next
// segment created in the same directory removes such files (sweepStale).
func openSegment(ctx context.Context, st setup) (*segment, error) {
	ctx, cancel := context.WithTimeout(ctx, st.timeout)
	defer cancel()
	path := segName(st.dir, st.id)
	var s *segment
	var err error
	if st.rank == 0 {
		s, err = createSegment(path, st)
	} else {
		s, err = attachSegment(ctx, path, st)
	}
	if err != nil {
		return nil, err
	}
	if err := s.join(ctx, st); err != nil {
		s.postAbort(st.rank, st.rank, "could not join the shared-memory segment: "+err.Error())
		s.close()
		return nil, err
	}
	if st.rank == 0 {
		if err := os.Remove(path); err != nil {
			s.close()
			return nil, fmt.Errorf("comm: remove the shared-memory segment's name %s: %w", path, err)
		}
	}
	s.path = ""
	return s, nil
}

func createSegment(path string, st setup) (*segment, error) {
	sweepStale(st.dir)
	dataOff, arenaOff, total := segLayout(st.size, st.slotBytes, st.arenaBytes)
	// An unnamed file first: it gets its name only once it is initialized and
	// locked, so no one ever sees a half-made segment or a named one without a lock.
	fd, err := unix.Open(st.dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("comm: create a shared-memory segment in %s: %w (it must be a writable tmpfs such as /dev/shm; or set the transport to tcp)", st.dir, err)
	}
	s := &segment{fd: fd, size: st.size, slotBytes: st.slotBytes, dataOff: dataOff, arenaOff: arenaOff}
	fail := func(err error) (*segment, error) { s.close(); return nil, err }
	// Reserve the pages of the rounds now: a full tmpfs is an error here, not a
	// SIGBUS mid-run. The arena's are reserved as they are handed out
	// (arena.alloc), so an arena sized for the largest model costs nothing until used.
	if err := unix.Fallocate(fd, 0, 0, int64(arenaOff)); err != nil {
		return fail(fmt.Errorf("comm: reserve %d bytes of shared memory in %s: %w (free space there, lower the chunk size, or set the transport to tcp)", arenaOff, st.dir, err))
	}
	if err := unix.Ftruncate(fd, int64(total)); err != nil {
		return fail(fmt.Errorf("comm: size the shared-memory segment to %d bytes: %w", total, err))
	}
	if s.mem, err = unix.Mmap(fd, 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fail(fmt.Errorf("comm: map the shared-memory segment: %w", err))
	}
	*s.u32(hVersion) = segVersion
	*s.u32(hSize) = uint32(st.size)
	*(*uint64)(unsafe.Pointer(&s.mem[hSlotBytes])) = uint64(st.slotBytes)
	*(*uint64)(unsafe.Pointer(&s.mem[hIDHash])) = idHash(st.id)
	*(*uint64)(unsafe.Pointer(&s.mem[hArenaBytes])) = uint64(st.arenaBytes)
	s.mapArena(st.arenaBytes)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&s.mem[hMagic])), segMagic)
	if _, err := lockByte(fd, unix.F_OFD_SETLK, 0, 1); err != nil {
		return fail(fmt.Errorf("comm: lock the shared-memory segment: %w", err))
	}
	if err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW); err != nil {
		return fail(fmt.Errorf("comm: name the shared-memory segment %s: %w", path, err))
	}
	s.path = path
	return s, nil
}

// attachSegment waits for rank 0's segment to appear and maps it.
func attachSegment(ctx context.Context, path string, st setup) (*segment, error) {
	if _, err := os.Stat(st.dir); err != nil { // rank 0 cannot create it either
		return nil, fmt.Errorf("comm: shared-memory directory: %w (it must be a writable tmpfs such as /dev/shm; or set the transport to tcp)", err)
	}
	backoff := time.Millisecond
	var fd int
	for {
		var err error
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("comm: open the shared-memory segment %s: %w", path, err)
		}
		if st.peerAlive != nil && !st.peerAlive(0) {
			return nil, fmt.Errorf("comm: %s died before it created the shared-memory segment %s", st.describe(0), path)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("comm: %s did not create the shared-memory segment %s within %v (was it started on another node? then give each node its own node id, or set the transport to tcp): %w",
				st.describe(0), path, st.timeout, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
	s := &segment{fd: fd, size: st.size}
	fail := func(err error) (*segment, error) { s.close(); return nil, err }
	var stat unix.Stat_t
	if err := unix.Fstat(fd, &stat); err != nil {
		return fail(err)
	}
	if stat.Size < segHeaderBytes {
		return fail(fmt.Errorf("comm: shared-memory segment %s is %d bytes, not a segment", path, stat.Size))
	}
	var err error
	if s.mem, err = unix.Mmap(fd, 0, int(stat.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fail(fmt.Errorf("comm: map the shared-memory segment %s: %w", path, err))
	}
	magic := atomic.LoadUint64((*uint64)(unsafe.Pointer(&s.mem[hMagic])))
	s.slotBytes = int(*(*uint64)(unsafe.Pointer(&s.mem[hSlotBytes])))
	arenaBytes := int(min(*(*uint64)(unsafe.Pointer(&s.mem[hArenaBytes])), maxArenaBytes+1))
	var total int
	s.dataOff, s.arenaOff, total = segLayout(st.size, max(s.slotBytes, 0), arenaBytes)
	switch {
	case magic != segMagic || *s.u32(hVersion) != segVersion:
		return fail(fmt.Errorf("comm: %s is not a segment of this fsdpbench version (mixed builds in one job?)", path))
	case int(*s.u32(hSize)) != st.size || *(*uint64)(unsafe.Pointer(&s.mem[hIDHash])) != idHash(st.id):
		return fail(fmt.Errorf("comm: segment %s is for another group (%d ranks), this rank expects %d", path, *s.u32(hSize), st.size))
	case s.slotBytes <= 0 || s.slotBytes%64 != 0 || arenaBytes > maxArenaBytes || arenaBytes%4096 != 0 || int64(total) != stat.Size:
		return fail(fmt.Errorf("comm: segment %s has %d bytes for slots of %d and an arena of %d, want %d", path, stat.Size, s.slotBytes, arenaBytes, total))
	}
	s.mapArena(arenaBytes)
	s.path = path
	return s, nil
}

// join takes this rank's liveness lock, says so, and waits for every other rank.
func (s *segment) join(ctx context.Context, st setup) error {
	if st.rank != 0 {
		if _, err := lockByte(s.fd, unix.F_OFD_SETLK, st.rank, 1); err != nil {
			return fmt.Errorf("comm: lock rank %d's byte of the shared-memory segment (another process holds it: two ranks with one rank number?): %w", st.rank, err)
		}
	}
	publish(s.ctl(st.rank, cJoined), s.ctl(st.rank, cJoinedSleep), 1)
	for r := range st.size {
		word, sleepers := s.ctl(r, cJoined), s.ctl(r, cJoinedSleep)
		for !reached(atomic.LoadUint32(word), 1) {
			if origin, reporter, reason, ok := s.abortRecord(); ok {
				return fmt.Errorf("comm: setting up shared memory: %s (reported by group rank %d): %s", st.describe(origin), reporter, reason)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("comm: %s did not join the shared-memory segment within %v (was it started on another node? then give each node its own node id, or set the transport to tcp)", st.describe(r), st.timeout)
			}
			if st.peerAlive != nil && !st.peerAlive(r) {
				return fmt.Errorf("comm: %s died before it joined the shared-memory segment", st.describe(r))
			}
			atomic.AddUint32(sleepers, 1)
			if v := atomic.LoadUint32(word); !reached(v, 1) {
				futexWait(word, v, 20*time.Millisecond)
			}
			atomic.AddUint32(sleepers, ^uint32(0))
		}
	}
	return nil
}

// sweepStale removes segments in dir that no rank holds any more: their ranks died
// during setup (after setup a segment has no name). Every named segment is locked
// by its rank 0 from before it had a name, so an unlocked one is stale for sure.
func sweepStale(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for i, e := range entries {
		if i >= 10000 {
			return // a directory this full is someone else's problem; stay bounded
		}
		if !strings.HasPrefix(e.Name(), segPrefix) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		lk, err := lockByte(fd, unix.F_OFD_GETLK, 0, maxShmRanks)
		if err == nil && lk.Type == unix.F_UNLCK {
			_ = os.Remove(path)
		}
		unix.Close(fd)
	}
}
