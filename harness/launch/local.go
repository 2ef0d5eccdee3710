// Package launch holds the launchers: where a run's processes start and which
// devices they get. Local runs on this host; Slurm submits each run as a job.
package launch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// Launcher names a spec may give.
const (
	LocalName = "local"
	SlurmName = "slurm"
)

// Check says whether a launcher named in a spec can be used here; "" means local.
func Check(name string) error {
	switch name {
	case "", LocalName:
		return nil
	case SlurmName:
		return CheckSlurm()
	default:
		return fmt.Errorf("unknown launcher %q (known: %s, %s)", name, LocalName, SlurmName)
	}
}

// Local runs on this host and hands its devices out to runs, so that runs executing
// at the same time (--jobs > 1) never share a GPU. The zero value has no devices.
type Local struct {
	mu   sync.Mutex
	busy []bool
	// freed is closed and replaced whenever a device is released, to wake waiters.
	freed chan struct{}
}

// NewLocal returns a local launcher with devices 0..n-1.
func NewLocal(n int) *Local {
	return &Local{busy: make([]bool, max(n, 0)), freed: make(chan struct{})}
}

// Devices is how many devices the launcher hands out.
func (l *Local) Devices() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.busy)
}

// Acquire reserves n devices, waiting while other runs hold them, and returns their
// indices and the function that gives them back. n = 0 reserves nothing.
func (l *Local) Acquire(ctx context.Context, n int) ([]int, func(), error) {
	if n <= 0 {
		return nil, func() {}, nil
	}
	for {
		l.mu.Lock()
		if l.freed == nil {
			l.freed = make(chan struct{})
		}
		if n > len(l.busy) {
			l.mu.Unlock()
			return nil, nil, fmt.Errorf("the run needs %d devices and this host has %d (CUDA_VISIBLE_DEVICES or /dev/nvidia*); lower gpus_per_node or run it on a bigger host", n, len(l.busy))
		}
		var got []int
		for i, b := range l.busy {
			if !b && len(got) < n {
				got = append(got, i)
			}
		}
		if len(got) == n {
			for _, i := range got {
				l.busy[i] = true
			}
			l.mu.Unlock()
			var once sync.Once
			return got, func() { once.Do(func() { l.release(got) }) }, nil
		}
		wait := l.freed
		l.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

func (l *Local) release(devs []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, i := range devs {
		l.busy[i] = false
	}
	close(l.freed)
	l.freed = make(chan struct{})
}

var nvidiaDev = regexp.MustCompile(`^nvidia[0-9]+$`)

// DetectDevices counts this host's GPUs the way CUDA would see them:
// CUDA_VISIBLE_DEVICES when it is set, else the /dev/nvidiaN device files.
func DetectDevices() int {
	if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		n := 0
		for _, f := range strings.Split(v, ",") {
			f = strings.TrimSpace(f)
			if f == "" || strings.HasPrefix(f, "-") {
				break // CUDA stops at the first invalid entry
			}
			n++
		}
		return n
	}
	matches, _ := filepath.Glob("/dev/nvidia*")
	n := 0
	for _, m := range matches {
		if nvidiaDev.MatchString(filepath.Base(m)) {
			n++
		}
	}
	return n
}
