package kernels_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels/fakecuda"
)

// The kernels run on the CPU runner inside the fake libcuda, through the test
// driver (fakecuda/src/driver.cc): one driver process per schedule order, shared by
// the tests. FAKECUDA_TEST_ASAN=1 builds both with AddressSanitizer (make
// kernels-asan).

var (
	buildOnce sync.Once
	built     *fakecuda.Built
	buildErr  error
	fatbin    string

	driversMu sync.Mutex
	drivers   = map[bool]*driver{}
)

func TestMain(m *testing.M) {
	code := m.Run()
	driversMu.Lock()
	for _, d := range drivers {
		d.close()
	}
	driversMu.Unlock()
	if built != nil {
		os.RemoveAll(built.Dir)
	}
	os.Exit(code)
}

// DriverEnv names a prebuilt driver to run the op tests with instead of building
// the fake: gpucheck.sh sets it to a driver linked against the system's libcuda.so.1,
// so the same tests run the kernels on a real GPU against the cpu device.
const DriverEnv = "FSDPBENCH_KERNELS_DRIVER"

// fake builds the fake libcuda and driver once per test process (or takes the
// driver of DriverEnv).
func fake(t *testing.T) *fakecuda.Built {
	t.Helper()
	if drv := os.Getenv(DriverEnv); drv != "" {
		buildOnce.Do(func() {
			dir, err := os.MkdirTemp("", "kernels-gpu-")
			if err != nil {
				buildErr = err
				return
			}
			built = &fakecuda.Built{Dir: dir, Driver: drv}
			fatbin = dir + "/kernels.fatbin"
			buildErr = os.WriteFile(fatbin, kernels.Fatbin, 0o644)
		})
		require.NoError(t, buildErr)
		return built
	}
	fakecuda.NeedToolkit(t)
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fakecuda-")
		if err != nil {
			buildErr = err
			return
		}
		built, buildErr = fakecuda.Build(dir, fakecuda.Options{
			ASan:  os.Getenv("FAKECUDA_TEST_ASAN") == "1",
			Extra: []string{"testdata/checks.cu"},
		})
		if buildErr == nil {
			fatbin = dir + "/kernels.fatbin"
			buildErr = os.WriteFile(fatbin, kernels.Fatbin, 0o644)
		}
	})
	require.NoError(t, buildErr)
	return built
}

// needFake skips tests of the fake itself when DriverEnv runs a real GPU.
func needFake(t *testing.T) {
	t.Helper()
	if os.Getenv(DriverEnv) != "" {
		t.Skipf("%s is set: the kernels run on a real GPU, not on the fake", DriverEnv)
	}
}

// orders are the two schedules every kernel test runs under.
var orders = []struct {
	name    string
	reverse bool
}{{"forward", false}, {"reverse", true}}

// driver is a running test driver.
type driver struct {
	cmd    *exec.Cmd
	in     *bufio.Writer
	out    io.Reader
	stderr *lockedBuffer
	dead   bool
}

// lockedBuffer is the driver's stderr, written by exec's copying goroutine while a
// test may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// getDriver returns the shared driver of a schedule order, starting it once.
func getDriver(t *testing.T, reverse bool) *driver {
	b := fake(t)
	driversMu.Lock()
	defer driversMu.Unlock()
	if d := drivers[reverse]; d != nil && !d.dead {
		return d
	}
	d := startDriver(t, b.Driver, fatbin, reverse, nil)
	drivers[reverse] = d
	return d
}

// startDriver starts a driver with extra environment variables.
func startDriver(t *testing.T, drv, fatbin string, reverse bool, env []string) *driver {
	t.Helper()
	cmd := exec.Command(drv, fatbin)
	cmd.Env = append(os.Environ(), "FAKECUDA_SCHEDULE=forward")
	if reverse {
		cmd.Env = append(cmd.Env, "FAKECUDA_SCHEDULE=reverse")
	}
	cmd.Env = append(cmd.Env, env...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	d := &driver{cmd: cmd, in: bufio.NewWriter(stdin), out: bufio.NewReader(stdout), stderr: &lockedBuffer{}}
	cmd.Stderr = d.stderr
	require.NoError(t, cmd.Start())
	return d
}

func (d *driver) close() {
	d.in.WriteByte('Q')
	d.in.Flush()
	d.cmd.Wait()
}

// bufArg is a pointer argument: buffer idx at byte offset off.
type bufArg struct{ idx, off int }

// buf is the pointer to buffer i; at is buffer i from element (4 bytes) off.
func buf(i int) bufArg     { return bufArg{i, 0} }
func at(i, off int) bufArg { return bufArg{i, 4 * off} }

// statusDead is the status of a launch whose driver died.
const statusDead = ^uint32(0)

// launchResult is a launch's status and buffers after it.
type launchResult struct {
	status uint32
	bufs   [][]byte
}

// launch runs kernel k with the grid (x, y, z) and shared bytes over copies of bufs,
// checking each argument's Go type against the ABI table, and returns the buffers.
func (d *driver) launch(t *testing.T, k *kernels.Kernel, grid [3]int, shared int, bufs [][]byte, args ...any) launchResult {
	t.Helper()
	require.Len(t, args, len(k.Params), "%s: arguments", k.Name)
	var w bytes.Buffer
	le := binary.LittleEndian
	put := func(v any) { binary.Write(&w, le, v) }
	w.WriteByte('K')
	put(uint32(len(k.Name)))
	w.WriteString(k.Name)
	for _, g := range grid {
		put(uint32(g))
	}
	put([3]uint32{uint32(k.Block), 1, 1})
	put(uint32(shared))
	put(uint32(len(bufs)))
	for _, b := range bufs {
		put(uint64(len(b)))
		w.Write(b)
	}
	put(uint32(len(args)))
	for i, a := range args {
		want := k.Params[i].Kind
		var got kernels.Kind
		switch v := a.(type) {
		case bufArg:
			got = kernels.Ptr
			w.WriteByte('p')
			put(uint32(v.idx))
			put(uint64(v.off))
		case int32:
			got = kernels.I32
			w.WriteByte('i')
			put(v)
		case int64:
			got = kernels.I64
			w.WriteByte('l')
			put(v)
		case float32:
			got = kernels.F32
			w.WriteByte('f')
			put(v)
		default:
			t.Fatalf("%s: argument %d of type %T", k.Name, i, a)
		}
		require.Equal(t, want, got, "%s: parameter %d (%s)", k.Name, i, k.Params[i].Name)
	}
	_, err := d.in.Write(w.Bytes())
	require.NoError(t, err)
	require.NoError(t, d.in.Flush())
	var res launchResult
	if err := binary.Read(d.out, le, &res.status); err != nil {
		// The driver died (a kernel aborted on a barrier check, or a CHECK failed):
		// status dead, stderr says why.
		d.dead = true
		d.cmd.Wait()
		res.status = statusDead
		return res
	}
	for _, b := range bufs {
		out := make([]byte, len(b))
		_, err := io.ReadFull(d.out, out)
		require.NoError(t, err)
		res.bufs = append(res.bufs, out)
	}
	if res.status != 0 {
		d.dead = true
		d.cmd.Wait()
	}
	return res
}

// run is launch that requires success.
func (d *driver) run(t *testing.T, k *kernels.Kernel, grid [3]int, shared int, bufs [][]byte, args ...any) [][]byte {
	t.Helper()
	r := d.launch(t, k, grid, shared, bufs, args...)
	if r.status != 0 {
		t.Fatalf("%s: launch status %#x (driver %v)\n%s", k.Name, r.status, d.cmd.ProcessState, d.stderr.String())
	}
	return r.bufs
}

// registry is the fake's kernel registry: name → "block sig".
func (d *driver) registry(t *testing.T) map[string]string {
	t.Helper()
	require.NoError(t, d.in.WriteByte('L'))
	require.NoError(t, d.in.Flush())
	var status, n uint32
	require.NoError(t, binary.Read(d.out, binary.LittleEndian, &status))
	require.NoError(t, binary.Read(d.out, binary.LittleEndian, &n))
	text := make([]byte, n)
	_, err := io.ReadFull(d.out, text)
	require.NoError(t, err)
	require.Zero(t, status, "the driver is not linked against the fake")
	m := map[string]string{}
	for line := range strings.Lines(string(text)) {
		f := strings.Fields(line)
		require.Len(t, f, 3, "registry line %q", line)
		m[f[0]] = f[1] + " " + f[2]
	}
	return m
}

func f32b(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func bf32(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

func i32b(x []int32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

// requireClose fails unless got and want agree element by element within
// |got − want| ≤ atol + rtol·|want| (rtol = atol = 0: bit for bit).
func requireClose(t *testing.T, what string, want, got []float32, rtol, atol float64) {
	t.Helper()
	require.Len(t, got, len(want), what)
	worst, at := 0.0, -1
	for i := range want {
		w, g := float64(want[i]), float64(got[i])
		if rtol == 0 && atol == 0 {
			if math.Float32bits(want[i]) != math.Float32bits(got[i]) && !(math.IsNaN(w) && math.IsNaN(g)) {
				t.Fatalf("%s: element %d: got %v (%#x), want %v (%#x) bit for bit", what, i, got[i],
					math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
			continue
		}
		if math.IsNaN(g) || math.IsInf(g, 0) {
			t.Fatalf("%s: element %d: got %v, want %v", what, i, g, w)
		}
		if e := math.Abs(g-w) - (atol + rtol*math.Abs(w)); e > worst {
			worst, at = e, i
		}
	}
	if at >= 0 {
		t.Fatalf("%s: element %d: got %v, want %v (|diff| %.3g over atol %.3g + rtol %.3g·|want|)", what, at,
			got[at], want[at], math.Abs(float64(got[at])-float64(want[at])), atol, rtol)
	}
}

// name is a subtest name for a shape.
func name(format string, a ...any) string { return fmt.Sprintf(format, a...) }
