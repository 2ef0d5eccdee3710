// Package dirlock gives one process at a time a results directory: a sweep, an
// ingest, anything that writes runs into <results>/<sweep>/ holds its lock for as
// long as it writes, and a second one is refused at once, told who holds it, or
// waits for it.
//
// The lock is flock(2) on a file in the directory (gofrs/flock). The kernel drops
// it when its holder dies, however it dies (kill -9 included), so a stale lock
// never blocks a resume: the file stays behind but nobody holds it. The file
// also records its holder (pid, host, command, start time) for the message the
// second process prints; that record is only informative, the flock decides.
// Linux's NFS client maps flock to NFS byte-range locks, so the lock also holds
// between hosts sharing an NFSv4 results directory.
package dirlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofrs/flock"
)

// File is the lock file's name inside the locked directory.
const File = ".fsdpbench.lock"

// pollInterval is how often a waiting process tries the lock again.
const pollInterval = 250 * time.Millisecond

// maxCommand bounds the command line recorded (and echoed to the next process).
const maxCommand = 300

// Holder is who holds a directory's lock, as the holder recorded it.
type Holder struct {
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	Command string    `json:"command,omitempty"`
	Started time.Time `json:"started"`
}

// String says who the holder is in one line, for messages.
func (h Holder) String() string {
	s := fmt.Sprintf("pid %d on host %s", h.PID, h.Host)
	if h.Command != "" {
		s += fmt.Sprintf(" (%s)", h.Command)
	}
	if !h.Started.IsZero() {
		s += fmt.Sprintf(", since %s", h.Started.Local().Format("2006-01-02 15:04:05 MST"))
	}
	return s
}

// HeldError is returned when another process holds the lock and the caller did
// not ask to wait.
type HeldError struct {
	// Dir is the locked directory.
	Dir string
	// Holder is who holds it; zero when its record could not be read (it is
	// being written, or the holder could not write it).
	Holder Holder
}

func (e *HeldError) Error() string {
	who := "another process (it has not recorded who it is yet)"
	if e.Holder.PID > 0 {
		who = e.Holder.String()
	}
	return fmt.Sprintf("%s is in use by %s: one process at a time writes a results directory "+
		"(two sweeps would run and measure every run twice); wait for it to end, pass --wait to start when it does, "+
		"or use another --results directory", e.Dir, who)
}

// Options say how to take the lock.
type Options struct {
	// Wait makes Acquire wait for the holder to release the lock (until ctx ends)
	// instead of returning a HeldError.
	Wait bool
	// OnWait, when set, is called once when Acquire starts waiting, with the
	// holder, so that the caller can say what it is waiting for.
	OnWait func(*HeldError)
	// Command is recorded as the holder's command; default os.Args.
	Command []string
	// Now stamps the record; default time.Now.
	Now func() time.Time
}

// Lock is a held directory lock.
type Lock struct {
	fl   *flock.Flock
	path string
}

// Acquire locks dir (which must exist) for this process. It returns a *HeldError
// when another process holds it, unless o.Wait is set, in which case it waits
// until the lock is free or ctx ends (ctx's error). The same process locking the
// same directory twice is refused too: flock locks belong to open files.
func Acquire(ctx context.Context, dir string, o Options) (*Lock, error) {
	path := filepath.Join(dir, File)
	// A link or a FIFO planted in the file's place would have the record written
	// through it, or hang the open: only a regular file (or none yet) is a lock.
	if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("lock %s: not a regular file (%s); remove it, then run again", path, st.Mode().Type())
	}
	// 0666 and the umask: on a shared results directory the next user must be
	// able to open the file to try the lock and read who holds it.
	fl := flock.New(path, flock.SetPermissions(0o666), flock.SetFlag(os.O_CREATE|os.O_RDONLY|openFlags))
	ok, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w (the results directory must be writable, on a file system with locks: local, or NFSv4)", path, err)
	}
	if !ok {
		held := &HeldError{Dir: dir, Holder: readHolder(path)}
		if !o.Wait {
			return nil, held
		}
		if o.OnWait != nil {
			o.OnWait(held)
		}
		if ok, err = fl.TryLockContext(ctx, pollInterval); err != nil || !ok {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	l := &Lock{fl: fl, path: path}
	_ = l.record(o) // the lock holds without the record; the next process is only told less
	return l, nil
}

// record writes who holds the lock into the lock file. It writes through a second
// descriptor and never replaces the file: a renamed-over lock file would be a
// new file, which another process could lock at the same time.
func (l *Lock) record(o Options) error {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	cmd := o.Command
	if cmd == nil {
		cmd = os.Args
	}
	h := Holder{PID: os.Getpid(), Command: oneLine(cmd), Started: now().UTC()}
	h.Host, _ = os.Hostname()
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|openFlags, 0)
	if err != nil {
		return err
	}
	if err := soleLink(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteAt(append(b, '\n'), 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Release unlocks the directory. The lock file stays: removing it would let a
// process that opened it before the removal lock a file nobody else can see.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	if err := l.fl.Unlock(); err != nil {
		return fmt.Errorf("unlock %s: %w", l.path, err)
	}
	return nil
}

// readHolder reads the record of the lock's holder. The holder writes it just
// after taking the lock, so an empty or torn record is read again briefly.
func readHolder(path string) Holder {
	for range 10 {
		var h Holder
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &h) == nil && h.PID > 0 {
			h.Command = oneLine(strings.Fields(h.Command)) // it came from a file: keep it one short line
			return h
		}
		time.Sleep(20 * time.Millisecond)
	}
	return Holder{}
}

// oneLine joins a command line into one bounded line of printable text.
func oneLine(args []string) string {
	s := strings.Join(args, " ")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxCommand {
		s = strings.ToValidUTF8(s[:maxCommand], "") + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// IsHeld reports whether err says that another process holds a lock.
func IsHeld(err error) bool {
	var he *HeldError
	return errors.As(err, &he)
}
