package cpu

import "sync"

// A training step allocates and frees the same activation, gradient and
// communication buffers every step; taking their memory from Go's heap each time
// cost a step tens of megabytes of garbage, the collector's time to scan it, and
// page faults on fresh memory. The pool keeps the slices of freed buffers by
// length for the next Alloc of that length. Accounting is untouched: the tracker
// charges and releases bytes on Alloc and Free as before; the pool only decides
// where the elements come from.

// pool holds freed slices by length, up to a bound.
type pool[T float] struct {
	mu    sync.Mutex
	free  map[int][][]T
	bytes int64 // held in free
}

// take returns a zeroed slice of n elements, a pooled one when there is one.
func (p *pool[T]) take(n int, elemBytes int64) []T {
	p.mu.Lock()
	if l := p.free[n]; len(l) > 0 {
		s := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[n] = l[:len(l)-1]
		p.bytes -= int64(n) * elemBytes
		p.mu.Unlock()
		clear(s)
		return s
	}
	p.mu.Unlock()
	return make([]T, n)
}

// give keeps s for a later take, unless the pool would then hold more than
// limit bytes (the device's peak: a step's buffers fit, and a process whose
// sizes keep changing does not grow without bound).
func (p *pool[T]) give(s []T, elemBytes, limit int64) {
	b := int64(cap(s)) * elemBytes
	if cap(s) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+b > limit {
		return
	}
	if p.free == nil {
		p.free = map[int][][]T{}
	}
	s = s[:cap(s)]
	p.free[len(s)] = append(p.free[len(s)], s)
	p.bytes += b
}

// scratch lends the untracked work space of ops (attention's score blocks),
// reused across calls; the garbage collector may drop what is not in use.
type scratch[T float] struct{ p sync.Pool }

// get returns a slice of n elements, contents undefined.
func (s *scratch[T]) get(n int) *[]T {
	if b, ok := s.p.Get().(*[]T); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]T, n)
	return &b
}

// put returns a slice from get.
func (s *scratch[T]) put(b *[]T) { s.p.Put(b) }
