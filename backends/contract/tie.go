package contract

import (
	"runtime"
	"sync"
)

// Tie runs start, which starts processes whose SysProcAttr.Pdeathsig is set, on an
// OS thread of its own that stays alive until release is called: call release once
// those processes have been waited for.
//
// Linux sends the parent-death signal when the *thread* that forked the child
// exits, not the process. A Go program's threads are shared by all goroutines and
// the runtime ends a thread when a goroutine that locked it exits without
// unlocking, so a child forked from an arbitrary goroutine could get its "parent
// died" signal in the middle of a healthy run, the day any code in the process
// (a cgo library, a CUDA binding) locks and leaves a thread. Forking from a thread
// locked for the child's whole life rules that out; the cost is one idle thread per
// running child group. A watchdog in the child (polling getppid, or EOF on a pipe)
// would also work, but only for children we write; Pdeathsig works for any
// program, and Go's fork checks for a parent that died before the signal was armed.
func Tie(start func() error) (release func(), err error) {
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		errc <- start()
		<-done
		// The children are gone: the thread may serve other goroutines again.
		runtime.UnlockOSThread()
	}()
	err = <-errc
	var once sync.Once
	release = func() { once.Do(func() { close(done) }) }
	if err != nil {
		release()
	}
	return release, err
}
