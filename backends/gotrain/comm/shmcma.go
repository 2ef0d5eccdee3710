package comm

import (
	"errors"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cross-memory reads. When every rank of a shared-memory group may read the
// others' memory with process_vm_readv (same user, same PID namespace, no Yama or
// seccomp rule against it: the setup probes each pair), collectives skip the
// slots: each rank publishes the address of its buffer, the peers copy straight
// out of it into theirs, one copy instead of two (the kernel's copy, like the
// CMA transports of MPI and NCCL), and the owner returns only once every peer
// has read. Results are the slots' results, bit for bit: the same reductions in
// the same order. Where a pair cannot read, the group stays on the slots.

// cmaProbe is what a peer reads in this process to test cross-memory reads.
var cmaProbe = uint64(segMagic)

// probe reports whether this process can read rank r's memory.
func (s *segment) probe(r int) bool {
	var got uint64
	addr := uintptr(*(*uint64)(unsafe.Pointer(s.ctl(r, cProbe))))
	err := readRemote(int(*s.ctl(r, cPid)), unsafe.Slice((*byte)(unsafe.Pointer(&got)), 8), addr)
	return err == nil && got == segMagic
}

// cmaChunk is the piece of a peer's buffer that a reduction reads at a time: it
// stays in cache until it is added.
const cmaChunk = 64 << 10 // elements

// readRemote copies len(dst) bytes from addr in process pid.
func readRemote(pid int, dst []byte, addr uintptr) error {
	for len(dst) > 0 {
		local := []unix.Iovec{{Base: &dst[0]}}
		local[0].SetLen(len(dst))
		n, err := unix.ProcessVMReadv(pid, local, []unix.RemoteIovec{{Base: addr, Len: len(dst)}}, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return unix.EFAULT
		}
		dst, addr = dst[n:], addr+uintptr(n)
	}
	return nil
}

// readPeer copies len(dst) elements from group rank j's published buffer, starting
// at element off.
func (c *shm) readPeer(j int, dst []float32, base uintptr, off int) error {
	if len(dst) == 0 {
		return nil
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), 4*len(dst))
	if err := readRemote(c.pids[j], b, base+uintptr(4*off)); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return &shmFault{kind: faultDead, peer: j, err: err}
		}
		return &shmFault{kind: faultRead, peer: j, err: err}
	}
	return nil
}

// directRound runs one round in which the peers read buf (this rank's buffer)
// in place: it publishes buf's address with the round's header, checks every
// peer's header, runs take with the peers' addresses, and returns once every peer
// has finished its take (until then buf must not change under them).
func (c *shm) directRound(op *shmOp, n int, buf []float32, take func(addr func(j int) uintptr) error) error {
	s := c.seg
	c.rounds++
	g, h := uint32(c.rounds), int(c.rounds%shmDepth)
	if c.rounds > shmDepth {
		for j := range c.size {
			if j != c.rank {
				if err := c.await(op, j, s.ctl(j, cRead), s.ctl(j, cReadSleep), g-shmDepth); err != nil {
					return err
				}
			}
		}
	}
	direct := func(j int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[segHeaderBytes+j*ctlBytes+cDirect])) }
	atomic.StoreUint64(direct(c.rank), uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))))
	if err := c.publishRound(op, n, g, h); err != nil {
		return err
	}
	if err := take(func(j int) uintptr { return uintptr(atomic.LoadUint64(direct(j))) }); err != nil {
		return err
	}
	publish(s.ctl(c.rank, cRead), s.ctl(c.rank, cReadSleep), g)
	for j := range c.size {
		if j != c.rank {
			if err := c.await(op, j, s.ctl(j, cRead), s.ctl(j, cReadSleep), g); err != nil {
				return err
			}
		}
	}
	op.frame++
	return nil
}

// allGatherDirect is AllGather by cross-memory reads.
func (c *shm) allGatherDirect(op *shmOp, dst, src []float32) error {
	n := len(src)
	copy(dst[c.rank*n:], src)
	return c.directRound(op, n, src, func(addr func(int) uintptr) error {
		for j := range c.size {
			if j != c.rank {
				if err := c.readPeer(j, dst[j*n:(j+1)*n], addr(j), 0); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// broadcastDirect is Broadcast by cross-memory reads from the root.
func (c *shm) broadcastDirect(op *shmOp, buf []float32, root int) error {
	return c.directRound(op, len(buf), buf, func(addr func(int) uintptr) error {
		if c.rank == root {
			return nil
		}
		return c.readPeer(root, buf, addr(root), 0)
	})
}

// reduceDirect reduces, in ring order with this rank as the owner, the elements
// [lo, hi) of every rank's published buffer into out (len hi−lo), reading the
// peers' pieces in chunks that stay in cache. mine is this rank's own elements
// [lo, hi); it may be out itself.
func (c *shm) reduceDirect(out, mine []float32, lo, hi int, avg bool, addr func(int) uintptr) error {
	size := c.size
	c.scratch = grow(c.scratch, size*cmaChunk)
	for off := 0; off < hi-lo; off += cmaChunk {
		m := min(cmaChunk, hi-lo-off)
		part := func(k int) []float32 { return c.scratch[k*cmaChunk : k*cmaChunk+m] }
		for k := range size {
			if k == c.rank {
				copy(part(k), mine[off:off+m]) // out may be mine: keep its old values
				continue
			}
			if err := c.readPeer(k, part(k), addr(k), lo+off); err != nil {
				return err
			}
		}
		reduceInto(out[off:off+m], size, c.rank, avg, part)
	}
	return nil
}

// reduceScatterDirect is ReduceScatter by cross-memory reads: each rank reads its
// own segment out of every peer's src.
func (c *shm) reduceScatterDirect(sop *shmOp, dst, src []float32, op Op) error {
	n := len(dst)
	return c.directRound(sop, len(src), src, func(addr func(int) uintptr) error {
		return c.reduceDirect(dst, src[c.rank*n:(c.rank+1)*n], c.rank*n, (c.rank+1)*n, op == Average, addr)
	})
}

// allReduceDirect is AllReduce by cross-memory reads, in place, in two rounds:
// each rank reduces its ring segment (which no peer reads in this round) into its
// own buffer, then reads every other segment from its owner (and peers read only
// this rank's own, final, segment).
func (c *shm) allReduceDirect(sop *shmOp, buf []float32, op Op, seg func(j int) (int, int)) error {
	lo, hi := seg(c.rank)
	err := c.directRound(sop, len(buf), buf, func(addr func(int) uintptr) error {
		return c.reduceDirect(buf[lo:hi], buf[lo:hi], lo, hi, op == Average, addr)
	})
	if err != nil {
		return err
	}
	return c.directRound(sop, len(buf), buf, func(addr func(int) uintptr) error {
		for j := range c.size {
			if j != c.rank {
				jlo, jhi := seg(j)
				if err := c.readPeer(j, buf[jlo:jhi], addr(j), jlo); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
