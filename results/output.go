package results

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Stdout is the output path that means the command's standard output.
const Stdout = "-"

// IsStdout reports whether an output path names the command's standard output:
// "-" or /dev/stdout.
func IsStdout(path string) bool {
	return path == Stdout || filepath.Clean(path) == "/dev/stdout"
}

// WriteOutput writes a command's output file (export -o, gate --junit and
// --markdown, calibrate -o, plot -o) to path without ever replacing what the
// path names with something else:
//
//   - "-" and /dev/stdout are written to stdout;
//   - an absent path, or a regular file, is written atomically (a temporary file
//     beside it, renamed over it), so a reader never sees half a file; a file
//     replaced keeps its permission bits;
//   - a symbolic link to a regular file replaces the file it leads to, atomically,
//     and the link stays;
//   - a character device (/dev/null, a terminal), a FIFO and a path through an open
//     descriptor (/dev/stderr, /dev/fd/N, /proc/self/fd/N) are opened and written
//     through, as a shell's > does;
//   - a directory, a block device, a socket and a link that leads nowhere (or
//     loops) are refused with an error saying which.
//
// Errors name path and say what to give instead; callers treat them as usage
// errors (exit 2), as the path came from the command line.
func WriteOutput(path string, data []byte, stdout io.Writer) error {
	if path == "" {
		return errors.New("output: empty file name; give a file, or - for stdout")
	}
	if IsStdout(path) {
		if _, err := stdout.Write(data); err != nil {
			return fmt.Errorf("write stdout: %w", err)
		}
		return nil
	}
	if throughDescriptor(path) {
		return writeThrough(path, data)
	}
	lst, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := writeAtomic(path, data, nil); err != nil {
			return fmt.Errorf("%w (check that the directory exists and is writable)", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, bareErr(err))
	}
	st, target, err := outputTarget(path, lst)
	if err != nil {
		return err
	}
	mode := st.Mode()
	switch {
	case mode.IsDir():
		return fmt.Errorf("write %s: is a directory; give a file name (such as %s)", path, filepath.Join(path, "out"))
	case mode.IsRegular():
		perm := mode.Perm()
		if err := writeAtomic(target, data, &perm); err != nil {
			return fmt.Errorf("%w (the file is replaced by a new one beside it: check that its directory is writable)", err)
		}
		return nil
	case mode&fs.ModeCharDevice != 0, mode&fs.ModeNamedPipe != 0:
		return writeThrough(path, data)
	case mode&fs.ModeDevice != 0:
		return fmt.Errorf("write %s: is a block device; refusing to write over it, give a file name", path)
	case mode&fs.ModeSocket != 0:
		return fmt.Errorf("write %s: is a socket; give a file name, or - for stdout", path)
	default:
		return fmt.Errorf("write %s: not a regular file, device or FIFO (%v); give a file name", path, mode.Type())
	}
}

// throughDescriptor reports whether path, or the chain of links it starts, goes
// through a process's open descriptors (/dev/stderr -> /proc/self/fd/2): those are
// written through, never replaced, as the descriptor may be a pipe, a terminal or
// a file the shell opened for appending.
func throughDescriptor(path string) bool {
	p := path
	for range 40 {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if strings.HasPrefix(p, "/dev/fd/") || (strings.HasPrefix(p, "/proc/") && strings.Contains(p, "/fd/")) {
			return true
		}
		dest, err := os.Readlink(p)
		if err != nil {
			return false
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(filepath.Dir(p), dest)
		}
		p = dest
	}
	return false
}

// writeThrough opens an existing path for writing, without creating or truncating
// it (O_APPEND: a descriptor a shell opened with >> keeps what it holds), and
// writes data.
func writeThrough(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, bareErr(err))
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("write %s: %w", path, bareErr(werr))
	}
	return nil
}

// outputTarget is what an output path that exists (lst, its Lstat) names: a
// symbolic link is followed, and the path written is the link's target when it
// is a regular file (the link stays); a link that loops or leads nowhere is an
// error that says so. WriteOutput and CheckOutput share it, so the check says
// what the write would.
func outputTarget(path string, lst fs.FileInfo) (fs.FileInfo, string, error) {
	if lst.Mode()&fs.ModeSymlink == 0 {
		return lst, path, nil
	}
	st, err := os.Stat(path)
	if err != nil {
		why := "leads to nothing"
		if errors.Is(err, syscall.ELOOP) {
			why = "loops"
		}
		dest, _ := os.Readlink(path)
		return nil, "", fmt.Errorf("write %s: is a symbolic link that %s (-> %s); point it at a file or give another path", path, why, dest)
	}
	if !st.Mode().IsRegular() {
		return st, path, nil
	}
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, "", fmt.Errorf("write %s: %w", path, bareErr(err))
	}
	return st, target, nil
}
