//go:build !unix

package input

// openFlags is 0 where there are no FIFOs to block on.
const openFlags = 0
