package kernels_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels/fakecuda"
)

// TestFatbinIsGenerated regenerates the fatbin from the sources and requires the
// committed one byte for byte: a .cu edited without `go generate` fails here.
func TestFatbinIsGenerated(t *testing.T) {
	fakecuda.NeedToolkit(t)
	out := filepath.Join(t.TempDir(), "kernels.fatbin")
	cmd := exec.Command("./gen.sh", out)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "gen.sh: %s", msg)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.True(t, bytes.Equal(got, kernels.Fatbin),
		"kernels.fatbin is stale (%d bytes regenerated, %d committed): run go generate ./backends/gotrain/device/cuda/kernels",
		len(got), len(kernels.Fatbin))
}

func cuobjdump(t *testing.T, flag string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "k.fatbin")
	require.NoError(t, os.WriteFile(f, kernels.Fatbin, 0o644))
	out, err := exec.Command("cuobjdump", flag, f).CombinedOutput()
	require.NoError(t, err, "cuobjdump %s: %s", flag, out)
	return string(out)
}

// usage is one kernel's resources in one cubin.
type usage struct{ reg, stack, shared, local int }

var (
	archRe  = regexp.MustCompile(`(?m)^arch = (sm_\d+)$`)
	funcRe  = regexp.MustCompile(`(?m)^\s*Function (\w+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)`)
	entryRe = regexp.MustCompile(`(?s)\.visible \.entry (\w+)\(\s*(.*?)\)\s*\.maxntid (\d+), 1, 1`)
	paramRe = regexp.MustCompile(`\.param \.(\w+) (\w+)`)
)

// TestResourcesFitTheLaunch parses cuobjdump -res-usage: in every cubin each
// kernel of the ABI exists, uses no stack or local memory, and its registers ×
// block, and static plus dynamic shared memory at MaxHeadDim, fit one SM without
// the shared-memory opt-in (so a launch never needs cuFuncSetAttribute).
func TestResourcesFitTheLaunch(t *testing.T) {
	fakecuda.NeedToolkit(t)
	text := cuobjdump(t, "-res-usage")
	perArch := map[string]map[string]usage{}
	arch := ""
	for _, sec := range strings.Split(text, "Fatbin elf code:") {
		if m := archRe.FindStringSubmatch(sec); m != nil {
			arch = m[1]
		}
		for _, m := range funcRe.FindAllStringSubmatch(sec, -1) {
			n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
			if perArch[arch] == nil {
				perArch[arch] = map[string]usage{}
			}
			perArch[arch][m[1]] = usage{n(2), n(3), n(4), n(5)}
		}
	}
	require.ElementsMatch(t, []string{"sm_80", "sm_90"}, mapsKeys(perArch), "cubins in the fatbin")
	for arch, fns := range perArch {
		var names []string
		for _, k := range kernels.All {
			names = append(names, k.Name)
			u, ok := fns[k.Name]
			require.True(t, ok, "%s: %s missing", arch, k.Name)
			dyn := 0
			if k.Shared != nil {
				dyn = k.Shared(kernels.MaxHeadDim)
			}
			require.Zero(t, u.stack, "%s %s: stack", arch, k.Name)
			require.Zero(t, u.local, "%s %s: local memory", arch, k.Name)
			require.LessOrEqual(t, u.reg, 255, "%s %s: registers", arch, k.Name)
			require.LessOrEqual(t, u.reg*k.Block, 65536, "%s %s: %d registers × block %d", arch, k.Name, u.reg, k.Block)
			require.LessOrEqual(t, u.shared+dyn, 48*1024, "%s %s: shared %d static + %d dynamic", arch, k.Name, u.shared, dyn)
		}
		require.ElementsMatch(t, names, mapsKeys(fns), "%s: kernels in the cubin against abi.go", arch)
	}
}

func mapsKeys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

// ptxKind is how each ABI kind is declared in PTX.
var ptxKind = map[kernels.Kind]string{kernels.Ptr: "u64", kernels.I64: "u64", kernels.I32: "u32", kernels.F32: "f32"}

// TestPTXParamsMatchABI requires every .entry of the compute_80 PTX to declare the
// parameters abi.go lists (count, order, type) and .maxntid = Block, and the
// fake's registry (compiled from the same source by g++, which tells pointers from
// int64) to give the same signature letter for letter.
func TestPTXParamsMatchABI(t *testing.T) {
	needFake(t)
	fakecuda.NeedToolkit(t)
	text := cuobjdump(t, "-ptx")
	entries := map[string][]string{}
	for _, m := range entryRe.FindAllStringSubmatch(text, -1) {
		var kinds []string
		for _, p := range paramRe.FindAllStringSubmatch(m[2], -1) {
			kinds = append(kinds, p[1])
		}
		entries[m[1]] = kinds
		k := kernels.Lookup(m[1])
		require.NotNil(t, k, "PTX entry %s is not in abi.go", m[1])
		require.Equal(t, strconv.Itoa(k.Block), m[3], "%s: .maxntid against Block", k.Name)
	}
	reg := getDriver(t, false).registry(t)
	letter := map[kernels.Kind]byte{kernels.Ptr: 'p', kernels.I32: 'i', kernels.I64: 'l', kernels.F32: 'f'}
	for _, k := range kernels.All {
		got, ok := entries[k.Name]
		require.True(t, ok, "%s: no .entry in the PTX", k.Name)
		var want []string
		var sig []byte
		for _, p := range k.Params {
			want = append(want, ptxKind[p.Kind])
			sig = append(sig, letter[p.Kind])
		}
		require.Equal(t, want, got, "%s: PTX parameters against abi.go", k.Name)
		require.Equal(t, strconv.Itoa(k.Block)+" "+string(sig), reg[k.Name], "%s: the runner's registry against abi.go", k.Name)
	}
	n := 0
	for name := range reg {
		if strings.HasPrefix(name, "fsdp_") { // the test build adds testdata/checks.cu's check_ kernels
			n++
		}
	}
	require.Equal(t, len(kernels.All), n, "fsdp_ kernels in the registry: %v", reg)
}
