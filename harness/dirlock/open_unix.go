//go:build unix

package dirlock

import (
	"fmt"
	"os"
	"syscall"
)

// openFlags keep the lock file's opens from following a link or blocking on a
// FIFO put in its place.
const openFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// soleLink refuses a lock file with other hard links: the record written into it
// would change a file elsewhere.
func soleLink(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok && s.Nlink > 1 {
		return fmt.Errorf("%s has %d hard links; not writing through it", f.Name(), s.Nlink)
	}
	return nil
}
