package comm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
)

// workerEnv selects the worker mode when the test binary runs as one rank of a
// multi-process test; transportEnv and shmDirEnv set its Options.
const (
	workerEnv    = "GOTRAIN_COMM_TEST_WORKER"
	transportEnv = "GOTRAIN_COMM_TEST_TRANSPORT"
	shmDirEnv    = "GOTRAIN_COMM_TEST_SHMDIR"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(workerEnv); mode != "" {
		os.Exit(worker(mode))
	}
	os.Exit(m.Run())
}

// Exit codes of a worker.
const (
	workerOK     = 0
	workerFailed = 1 // a check failed or setup broke
	workerPeer   = 3 // a collective failed because of a peer (loop mode)
)

// worker is one rank: it reads torchrun's variables like a real gotrain worker.
func worker(mode string) int {
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return workerFailed
	}
	ctx := context.Background()
	c, err := Dial(ctx, info, Options{OpTimeout: 20 * time.Second, ConnectTimeout: 20 * time.Second,
		Transport: os.Getenv(transportEnv), ShmDir: os.Getenv(shmDirEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return workerFailed
	}
	defer c.Close()
	switch mode {
	case "check":
		groups, err := workerCheck(ctx, info, c)
		if err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", info.Rank, err)
			return workerFailed
		}
		_ = json.NewEncoder(os.Stdout).Encode(workerReport{Stats: c.Stats(), Type: fmt.Sprintf("%T", c), Groups: groups})
		return workerOK
	case "loop", "loop-shared", "loop-inplace":
		// loop-shared: all-gathers into a shared buffer of the arena, allocated
		// and freed each time, as the trainer's gathered parameters; loop-inplace:
		// in-place all-gathers (barriers) of one resident buffer, as the trainer's
		// zero-copy gathers.
		buf := rankData(info.Rank, 1<<18)
		sg, _ := c.(SharedGatherer)
		if mode != "loop" && sg == nil {
			fmt.Fprintf(os.Stderr, "%T shares no buffers\n", c)
			return workerFailed
		}
		var resident []float32
		if mode == "loop-inplace" {
			var ok bool
			if resident, ok = sg.AllocShared(len(buf) * info.WorldSize); !ok {
				fmt.Fprintln(os.Stderr, "the arena has no room")
				return workerFailed
			}
			copy(resident[info.Rank*len(buf):], buf)
		}
		collective := func() error {
			switch mode {
			case "loop":
				return c.AllReduce(ctx, buf, Average)
			case "loop-inplace":
				return sg.AllGatherShared(ctx, resident, len(buf), device.F32, nil)
			}
			dst, ok := sg.AllocShared(len(buf) * info.WorldSize)
			if !ok {
				return errors.New("the arena has no room")
			}
			defer sg.FreeShared(dst)
			return c.AllGather(ctx, dst, buf)
		}
		for i := 0; ; i++ {
			if err := collective(); err != nil {
				var pe *PeerError
				dead := -1
				if errors.As(err, &pe) {
					dead = pe.Rank
				}
				fmt.Printf("failed dead=%d: %v\n", dead, err)
				return workerPeer
			}
			if i == 0 {
				fmt.Println("ready")
			}
		}
	}
	fmt.Fprintf(os.Stderr, "unknown worker mode %q\n", mode)
	return workerFailed
}

// workerReport is what a check worker prints.
type workerReport struct {
	Stats Stats
	// Type is the world communicator's Go type, and Groups the shard and
	// replicate groups': which transport ran.
	Type   string
	Groups [2]string
}

// workerCheck runs each collective once and checks the result against what every
// rank's deterministic input must give.
func workerCheck(ctx context.Context, info rendezvous.Info, c Communicator) (groups [2]string, err error) {
	size, rank := info.WorldSize, info.Rank
	const n = 1001
	in := make([][]float32, size)
	for r := range in {
		in[r] = rankData(r, n)
	}

	buf := slices.Clone(in[rank])
	if err := c.AllReduce(ctx, buf, Sum); err != nil {
		return groups, err
	}
	for j := range size {
		lo, hi := segBounds(n, size, j)
		for i := lo; i < hi; i++ {
			if want := ringSum(in, j, i); buf[i] != want {
				return groups, fmt.Errorf("all_reduce element %d: got %v, want %v", i, buf[i], want)
			}
		}
	}

	all := make([]float32, n*size)
	if err := c.AllGather(ctx, all, in[rank]); err != nil {
		return groups, err
	}
	if !slices.Equal(all, slices.Concat(in...)) {
		return groups, errors.New("all_gather result differs")
	}

	// Hybrid groups from the launcher's node layout.
	shard, err := c.Split(ctx, info.NodeRank, info.LocalRank)
	if err != nil {
		return groups, err
	}
	defer shard.Close()
	repl, err := c.Split(ctx, info.LocalRank, info.NodeRank)
	if err != nil {
		return groups, err
	}
	defer repl.Close()
	if shard.Size() != info.LocalWorldSize || shard.Rank() != info.LocalRank || repl.Rank() != info.NodeRank {
		return groups, fmt.Errorf("split: shard %d/%d, replicate rank %d", shard.Rank(), shard.Size(), repl.Rank())
	}
	one := []float32{float32(rank)}
	if err := repl.AllReduce(ctx, one, Sum); err != nil {
		return groups, err
	}
	var want float32
	for r := info.LocalRank; r < size; r += info.LocalWorldSize {
		want += float32(r)
	}
	if one[0] != want {
		return groups, fmt.Errorf("replicate all_reduce: got %v, want %v", one[0], want)
	}
	groups = [2]string{fmt.Sprintf("%T", shard), fmt.Sprintf("%T", repl)}
	return groups, c.Barrier(ctx)
}

// freePort finds a port for MASTER_PORT.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// workerProc is one started rank.
type workerProc struct {
	cmd    *exec.Cmd
	lines  chan string // stdout, line by line; closed at EOF
	stderr *strings.Builder
	done   chan error
}

// startWorkers starts size ranks of the test binary with torchrun's environment
// (localSize ranks per "node"); extra is added to their environment.
func startWorkers(t *testing.T, mode string, size, localSize int, extra ...string) []*workerProc {
	t.Helper()
	port := freePort(t)
	procs := make([]*workerProc, size)
	for r := range size {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			workerEnv+"="+mode,
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(size),
			"LOCAL_RANK="+strconv.Itoa(r%localSize), "LOCAL_WORLD_SIZE="+strconv.Itoa(localSize),
			"GROUP_RANK="+strconv.Itoa(r/localSize),
		)
		cmd.Env = append(cmd.Env, extra...)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		p := &workerProc{cmd: cmd, lines: make(chan string, 16), stderr: &strings.Builder{}, done: make(chan error, 1)}
		cmd.Stderr = p.stderr
		require.NoError(t, cmd.Start())
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				p.lines <- sc.Text()
			}
			close(p.lines)
			_, _ = io.Copy(io.Discard, stdout)
			p.done <- cmd.Wait()
		}()
		procs[r] = p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Kill() // no orphans when a check fails early
		}
	})
	return procs
}

// collect reads a worker's remaining output and its exit code, within limit.
func (p *workerProc) collect(t *testing.T, limit time.Duration) ([]string, int) {
	t.Helper()
	var out []string
	timeout := time.After(limit)
	for {
		select {
		case line, ok := <-p.lines:
			if ok {
				out = append(out, line)
				continue
			}
			err := <-p.done
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				require.NoError(t, err)
			}
			return out, p.cmd.ProcessState.ExitCode()
		case <-timeout:
			require.FailNow(t, "worker did not finish", "rank process %d still running after %v; stderr: %s", p.cmd.Process.Pid, limit, p.stderr)
		}
	}
}

func TestMultiProcess(t *testing.T) {
	const size = 4
	for _, tt := range []struct {
		name, transport string
		perNode         int
		world           string
		groups          [2]string // shard, replicate
	}{
		{"tcp", TransportTCP, 2, "*comm.ring", [2]string{"*comm.ring", "*comm.ring"}},
		// hybrid_shard's layout: shared memory inside each node, TCP across.
		{"auto-two-nodes", TransportAuto, 2, "*comm.ring", [2]string{"*comm.shm", "*comm.ring"}},
		{"shm-one-node", TransportShm, 4, "*comm.shm", [2]string{"*comm.shm", "*comm.ring"}}, // the replicate groups are of one rank
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := shmTestDir(t)
			procs := startWorkers(t, "check", size, tt.perNode, transportEnv+"="+tt.transport, shmDirEnv+"="+dir)
			for r, p := range procs {
				out, code := p.collect(t, time.Minute)
				require.Equal(t, workerOK, code, "rank %d: stderr: %s", r, p.stderr)
				require.Len(t, out, 1)
				var rep workerReport
				require.NoError(t, json.Unmarshal([]byte(out[0]), &rep))
				s := rep.Stats
				assert.Equal(t, int64(1), s.AllReduce.Calls)
				assert.Equal(t, int64(2), s.Split.Calls)
				assert.Positive(t, s.AllGather.BytesSent)
				assert.Equal(t, tt.world, rep.Type, "rank %d's world", r)
				assert.Equal(t, tt.groups, rep.Groups, "rank %d's groups", r)
			}
			requireNoSegments(t, dir)
		})
	}
}

func TestMultiProcessPeerKilled(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { testMultiProcessPeerKilled(t, tr, "loop") })
	}
	// Killed while its peers wait in all-gathers into a shared buffer.
	t.Run("shm-shared", func(t *testing.T) { testMultiProcessPeerKilled(t, TransportShm, "loop-shared") })
	// Killed while its peers wait in in-place all-gathers (zero-copy barriers).
	t.Run("shm-inplace", func(t *testing.T) { testMultiProcessPeerKilled(t, TransportShm, "loop-inplace") })
}

func testMultiProcessPeerKilled(t *testing.T, tr, mode string) {
	const size, victim = 4, 2
	dir := shmTestDir(t)
	procs := startWorkers(t, mode, size, size, transportEnv+"="+tr, shmDirEnv+"="+dir)
	for r, p := range procs {
		select {
		case line := <-p.lines:
			require.Equal(t, "ready", line, "rank %d: stderr: %s", r, p.stderr)
		case <-time.After(time.Minute):
			require.FailNow(t, "worker never became ready", "rank %d: stderr: %s", r, p.stderr)
		}
	}
	time.Sleep(50 * time.Millisecond) // every rank is inside its loop of all-reduces
	require.NoError(t, procs[victim].cmd.Process.Kill())
	killed := time.Now()
	for r, p := range procs {
		if r == victim {
			continue
		}
		out, code := p.collect(t, 10*time.Second)
		elapsed := time.Since(killed)
		require.Equal(t, workerPeer, code, "rank %d: output %q, stderr: %s", r, out, p.stderr)
		require.NotEmpty(t, out)
		last := out[len(out)-1]
		assert.Contains(t, last, fmt.Sprintf("dead=%d", victim), "rank %d", r)
		assert.Contains(t, last, fmt.Sprintf("rank %d on ", victim), "rank %d names the host", r)
		assert.Less(t, elapsed, 5*time.Second, "rank %d noticed within seconds (op timeout is 20s)", r)
		t.Logf("rank %d after %v: %s", r, elapsed.Round(time.Millisecond), last)
	}
	requireNoSegments(t, dir) // a rank killed with SIGKILL leaves no shared memory behind
}

func TestDialRendezvousTimeout(t *testing.T) {
	port := freePort(t)
	start := time.Now()
	errs := eachRank(2, func(r int) error {
		c, err := Dial(context.Background(), rendezvousInfo(r, 4, port), Options{ConnectTimeout: 300 * time.Millisecond})
		if err == nil {
			c.Close()
		}
		return err
	})
	require.Error(t, errs[0])
	assert.Contains(t, errs[0].Error(), fmt.Sprintf("rendezvous timed out after 300ms: ranks 2, 3 of 4 never connected to 127.0.0.1:%d", port))
	require.Error(t, errs[1])
	assert.Contains(t, errs[1].Error(), "ranks 2, 3 of 4 never connected", "the other ranks hear it from rank 0")
	assert.Less(t, time.Since(start), 10*time.Second)
}
