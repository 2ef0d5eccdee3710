//go:build unix

package input

import "syscall"

// openFlags makes opening a FIFO return at once rather than wait for a writer;
// ReadFile then refuses it as not a regular file.
const openFlags = syscall.O_NONBLOCK
