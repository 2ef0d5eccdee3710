package backends

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Registry maps backend names to implementations. The zero value is ready to use.
type Registry struct {
	mu       sync.RWMutex
	backends map[string]Backend
}

// Register adds b; a second backend with the same name is an error.
func (r *Registry) Register(b Backend) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.backends == nil {
		r.backends = map[string]Backend{}
	}
	if _, dup := r.backends[b.Name()]; dup {
		return fmt.Errorf("backend %q registered twice", b.Name())
	}
	r.backends[b.Name()] = b
	return nil
}

// Get returns the backend called name, or an error that lists the known ones.
func (r *Registry) Get(name string) (Backend, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if b, ok := r.backends[name]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("unknown backend %q (known: %s; `fsdpbench backends` lists them with their availability)",
		name, strings.Join(r.namesLocked(), ", "))
}

// Names lists the registered backends, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.namesLocked()
}

func (r *Registry) namesLocked() []string {
	names := make([]string, 0, len(r.backends))
	for n := range r.backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
