package main

import (
	"fmt"
	"io"

	"github.com/fsdpbench/fsdpbench/results"
)

// writeOutput writes an output file named by a flag (export -o, gate --junit and
// --markdown, calibrate -o) through results.WriteOutput: regular files are replaced
// atomically, devices, FIFOs and - are written through, a directory is refused.
// A path that cannot be written is a usage error (exit 2) in every command: the
// path came from the command line, and nothing ran that a retry would redo.
func writeOutput(flag, path string, data []byte, stdout io.Writer) error {
	if err := results.WriteOutput(path, data, stdout); err != nil {
		return usageError(fmt.Errorf("%s: %w", flag, err))
	}
	return nil
}
