//go:build unix

package dirlock

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holderEnv makes the test binary a helper process that takes the lock of the
// directory it names, says "locked" and sleeps until it is killed.
const holderEnv = "DIRLOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holderEnv); dir != "" {
		if _, err := Acquire(context.Background(), dir, Options{Command: []string{"holder", "of", dir}}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Println("locked")
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// holdInAnotherProcess starts a process that holds dir's lock and returns it once
// it does.
func holdInAnotherProcess(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)
	return cmd
}

func TestSecondHolderIsRefusedWithWhoHoldsIt(t *testing.T) {
	dir := t.TempDir()
	holder := holdInAnotherProcess(t, dir)

	start := time.Now()
	_, err := Acquire(context.Background(), dir, Options{})
	require.Error(t, err)
	assert.Less(t, time.Since(start), 2*time.Second, "refused at once")
	var he *HeldError
	require.ErrorAs(t, err, &he)
	host, _ := os.Hostname()
	assert.Equal(t, holder.Process.Pid, he.Holder.PID)
	assert.Equal(t, host, he.Holder.Host)
	assert.WithinDuration(t, time.Now(), he.Holder.Started, time.Minute)
	assert.Contains(t, err.Error(), fmt.Sprintf("pid %d on host %s", holder.Process.Pid, host))
	assert.Contains(t, err.Error(), "holder of "+dir)
	assert.Contains(t, err.Error(), "--wait")
	assert.True(t, IsHeld(err))
}

func TestKilledHolderLeavesNoLock(t *testing.T) {
	dir := t.TempDir()
	holder := holdInAnotherProcess(t, dir)
	require.NoError(t, holder.Process.Signal(syscall.SIGKILL))
	_ = holder.Wait()
	require.FileExists(t, filepath.Join(dir, File), "the file stays; the lock does not")

	l, err := Acquire(context.Background(), dir, Options{})
	require.NoError(t, err, "a killed holder's lock must not block the next process")
	require.NoError(t, l.Release())
}

func TestWaitTakesTheLockWhenTheHolderEnds(t *testing.T) {
	dir := t.TempDir()
	holder := holdInAnotherProcess(t, dir)
	var told *HeldError
	go func() {
		time.Sleep(500 * time.Millisecond)
		_ = holder.Process.Signal(syscall.SIGKILL)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := Acquire(ctx, dir, Options{Wait: true, OnWait: func(he *HeldError) { told = he }})
	require.NoError(t, err)
	defer l.Release()
	require.NotNil(t, told, "the caller is told what it waits for")
	assert.Equal(t, holder.Process.Pid, told.Holder.PID)
}

func TestWaitEndsWithTheContext(t *testing.T) {
	dir := t.TempDir()
	holdInAnotherProcess(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Acquire(ctx, dir, Options{Wait: true})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestSameProcessTwiceIsRefusedAndReleaseFrees(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(context.Background(), dir, Options{Command: []string{"fsdpbench", "sweep", "a\nb.yaml"}})
	require.NoError(t, err)
	_, err = Acquire(context.Background(), dir, Options{})
	var he *HeldError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, os.Getpid(), he.Holder.PID)
	assert.Equal(t, "fsdpbench sweep a b.yaml", he.Holder.Command, "a command is one line")
	require.NoError(t, l.Release())

	l2, err := Acquire(context.Background(), dir, Options{})
	require.NoError(t, err)
	require.NoError(t, l2.Release())
}

func TestLockFileFollowsTheUmask(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	l, err := Acquire(context.Background(), dir, Options{})
	require.NoError(t, err)
	defer l.Release()
	st, err := os.Stat(filepath.Join(dir, File))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm(), "colleagues on a shared directory can read who holds it")
}

func TestNoDirectoryIsAnErrorNotAHolder(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o644))
	_, err := Acquire(context.Background(), notDir, Options{})
	require.Error(t, err)
	assert.False(t, IsHeld(err))
	assert.Contains(t, err.Error(), "must be writable")
}

// TestPlantedLockFileIsNotFollowed: a link, a FIFO or a hard link planted as the
// lock file is refused or left alone; the file it points at is never written.
func TestPlantedLockFileIsNotFollowed(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "bashrc")
	require.NoError(t, os.WriteFile(outside, []byte("keep me\n"), 0o644))

	dir := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, File)))
	_, err := Acquire(context.Background(), dir, Options{})
	require.ErrorContains(t, err, "not a regular file")

	dir = t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, File), 0o644))
	done := make(chan error, 1)
	go func() {
		_, err := Acquire(context.Background(), dir, Options{})
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "not a regular file")
	case <-time.After(5 * time.Second):
		t.Fatal("a FIFO as the lock file hangs Acquire")
	}

	dir = t.TempDir()
	require.NoError(t, os.Link(outside, filepath.Join(dir, File)))
	l, err := Acquire(context.Background(), dir, Options{})
	require.NoError(t, err, "the lock itself holds")
	defer l.Release()
	b, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "keep me\n", string(b), "the holder record was not written through the hard link")
}
