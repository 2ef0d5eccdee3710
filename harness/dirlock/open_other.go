//go:build !unix

package dirlock

import "os"

// openFlags: no O_NOFOLLOW or O_NONBLOCK here; Acquire's Lstat refuses links.
const openFlags = 0

func soleLink(*os.File) error { return nil }
