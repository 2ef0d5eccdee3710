package results

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// CheckOutput says, before a command spends minutes computing its output
// (calibrate's fit), whether WriteOutput could write path, so that a wrong -o is
// refused at once rather than after the work: it refuses what WriteOutput
// refuses (a directory, a block device, a socket, a link that loops or leads
// nowhere), with the same words, and a file to create or replace whose directory
// is missing, not a directory, or not writable (WriteOutput writes a temporary
// file beside it). With mkdir, missing directories above the file are fine when
// the nearest one that exists is writable: the caller creates them. It writes
// nothing, and nil does not promise the write (a disk may fill meanwhile).
func CheckOutput(path string, mkdir bool) error {
	if path == "" {
		return errors.New("output: empty file name; give a file, or - for stdout")
	}
	if IsStdout(path) || throughDescriptor(path) {
		return nil
	}
	lst, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return checkOutputDir(path, filepath.Dir(path), mkdir)
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
		// Replaced by a new file written beside it: its directory must take one.
		return checkOutputDir(path, filepath.Dir(target), false)
	case mode&fs.ModeCharDevice != 0, mode&fs.ModeNamedPipe != 0:
		// Written through, as a shell's > does. Not opened here: opening a FIFO
		// for writing waits for its reader.
		if err := unix.Access(path, unix.W_OK); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	case mode&fs.ModeDevice != 0:
		return fmt.Errorf("write %s: is a block device; refusing to write over it, give a file name", path)
	case mode&fs.ModeSocket != 0:
		return fmt.Errorf("write %s: is a socket; give a file name, or - for stdout", path)
	default:
		return fmt.Errorf("write %s: not a regular file, device or FIFO (%v); give a file name", path, mode.Type())
	}
}

// checkOutputDir checks that dir, where path's file is written, is a writable
// directory; with mkdir, that the nearest of dir and its parents that exists is.
func checkOutputDir(path, dir string, mkdir bool) error {
	for {
		st, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist) && mkdir && filepath.Dir(dir) != dir:
			dir = filepath.Dir(dir) // made by the caller: its parent must take it
			continue
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("write %s: the directory %s does not exist (no such file or directory); create it or give another path", path, dir)
		case errors.Is(err, syscall.ENOTDIR):
			return fmt.Errorf("write %s: a part of %s is a file, not a directory; give another path", path, dir)
		case err != nil:
			return fmt.Errorf("write %s: %s: %w", path, dir, bareErr(err))
		case !st.IsDir():
			return fmt.Errorf("write %s: %s is not a directory; give another path", path, dir)
		}
		if err := unix.Access(dir, unix.W_OK); err != nil {
			return fmt.Errorf("write %s: the directory %s is not writable (%v); give a path in a directory you can write", path, dir, err)
		}
		return nil
	}
}
