//go:build cgo

package dynload

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// libm is on every glibc system; it stands in for a library found by soname.
const libm = "libm.so.6"

func TestOpenBySoname(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		symbols []string
	}{
		{"libm", Spec{Name: "libm", Sonames: []string{"libnotthere.so.9", libm}}, []string{"cos", "sqrtf"}},
		// The CUDA 11.8 toolkit installs the real driver library here; on
		// a machine without it this fails, which is the point: the cuda
		// device's tests need it too.
		{"real libcuda", CUDA, []string{"cuInit", "cuGetErrorName", "cuDeviceGetCount"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("FSDPBENCH_LIBCUDA", "")
			l, err := Open(tt.spec)
			require.NoError(t, err)
			defer func() { require.NoError(t, l.Close()) }()
			assert.Contains(t, tt.spec.Sonames, l.Path, "found by soname through the loader")
			for _, s := range tt.symbols {
				p, err := l.Symbol(s)
				require.NoError(t, err, s)
				assert.NotNil(t, p, s)
				assert.True(t, l.Has(s), s)
			}
			_, err = l.Symbol("fsdpbench_no_such_symbol")
			require.Error(t, err)
			assert.Contains(t, err.Error(), "fsdpbench_no_such_symbol")
			assert.Contains(t, err.Error(), l.Path)
			assert.False(t, l.Has("fsdpbench_no_such_symbol"))
		})
	}
}

func TestClosedLibraryRefusesSymbols(t *testing.T) {
	l, err := OpenPath(libm)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "closing twice is harmless")
	_, err = l.Symbol("cos")
	require.ErrorContains(t, err, "closed")
}

func TestEnvOverrideIsExclusive(t *testing.T) {
	spec := Spec{Name: "Test", EnvVar: "FSDPBENCH_LIBTEST", Sonames: []string{libm}}
	t.Run("loads the named path", func(t *testing.T) {
		t.Setenv(spec.EnvVar, libm)
		l, err := Open(spec)
		require.NoError(t, err)
		defer l.Close()
		assert.Equal(t, libm, l.Path)
	})
	t.Run("a bad override fails rather than falling back", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "libtest.so")
		t.Setenv(spec.EnvVar, bad)
		assert.Equal(t, []string{bad}, Candidates(spec))
		_, err := Open(spec)
		var nf *NotFoundError
		require.ErrorAs(t, err, &nf)
		require.Len(t, nf.Tried, 1)
		assert.Equal(t, bad, nf.Tried[0].Path)
		assert.Contains(t, err.Error(), "Test not found")
		assert.Contains(t, err.Error(), bad)
		assert.Contains(t, err.Error(), "set FSDPBENCH_LIBTEST")
	})
}

func TestMissingLibraryListsEverythingTried(t *testing.T) {
	sp := t.TempDir()
	spec := Spec{Name: "Absent", EnvVar: "FSDPBENCH_LIBABSENT", Sonames: []string{"libfsdpbench_absent.so.2"}, PyPackages: []string{"absent"}}
	t.Setenv(spec.EnvVar, "")
	_, err := open(spec, candidates(spec, []string{sp}), []string{sp})
	var nf *NotFoundError
	require.True(t, errors.As(err, &nf), "%v", err)
	msg := err.Error()
	assert.Contains(t, msg, "libfsdpbench_absent.so.2: ")
	assert.Contains(t, msg, filepath.Join(sp, "nvidia", "absent", "lib"))
	assert.Contains(t, msg, "FSDPBENCH_LIBABSENT")

	_, err = open(spec, candidates(spec, nil), nil)
	assert.ErrorContains(t, err, "no Python site-packages found")
}

func TestSitePackagesLibraryIsFound(t *testing.T) {
	// A fake environment laid out like pip's wheels, with libm copied in
	// under NCCL's soname: the search must find it after the loader path.
	sp := t.TempDir()
	dir := filepath.Join(sp, "nvidia", "nccl", "lib")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	src, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libm.so.6")
	if err != nil {
		src, err = filepath.EvalSymlinks("/usr/lib/x86_64-linux-gnu/libm.so.6")
	}
	require.NoError(t, err)
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	dst := filepath.Join(dir, "libfsdpbench_fake.so.2")
	require.NoError(t, os.WriteFile(dst, b, 0o755))

	spec := Spec{Name: "Fake", Sonames: []string{"libfsdpbench_fake.so.2"}, PyPackages: []string{"nccl"}}
	assert.Equal(t, []string{"libfsdpbench_fake.so.2", dst}, candidates(spec, []string{sp}))
	l, err := open(spec, candidates(spec, []string{sp}), []string{sp})
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, dst, l.Path)
	assert.True(t, l.Has("cos"))
}

func TestNCCLSearch(t *testing.T) {
	// NCCL is not in Debian, so here the search fails and must say where it
	// looked; on a GPU image it loads from site-packages and must be NCCL.
	t.Setenv(NCCL.EnvVar, "")
	l, err := Open(NCCL)
	if err == nil {
		defer l.Close()
		assert.True(t, l.Has("ncclGetVersion"), "%s loaded as NCCL", l.Path)
		return
	}
	msg := err.Error()
	assert.Contains(t, msg, "NCCL not found")
	assert.Contains(t, msg, "libnccl.so.2: ")
	assert.Contains(t, msg, "nvidia/nccl/lib")
	assert.Contains(t, msg, "FSDPBENCH_LIBNCCL")
	t.Log(msg)
}
