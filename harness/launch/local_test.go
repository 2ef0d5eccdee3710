package launch

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		wantErr string
	}{
		{name: "", wantErr: ""},
		{name: "local", wantErr: ""},
		{name: "k8s", wantErr: `unknown launcher "k8s"`},
	}
	// slurm is usable where its client commands are (TestSlurmCheck).
	for _, tt := range tests {
		err := Check(tt.name)
		if tt.wantErr == "" {
			assert.NoError(t, err, tt.name)
		} else {
			assert.ErrorContains(t, err, tt.wantErr, tt.name)
		}
	}
}

func TestAcquireHandsOutDistinctDevices(t *testing.T) {
	l := NewLocal(4)
	ctx := context.Background()
	a, releaseA, err := l.Acquire(ctx, 2)
	require.NoError(t, err)
	b, releaseB, err := l.Acquire(ctx, 2)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1}, a)
	assert.Equal(t, []int{2, 3}, b)

	// A third run waits until one of the first two gives its devices back.
	got := make(chan []int)
	go func() {
		c, release, err := l.Acquire(ctx, 2)
		assert.NoError(t, err)
		release()
		got <- c
	}()
	select {
	case <-got:
		t.Fatal("acquired devices that were all busy")
	case <-time.After(20 * time.Millisecond):
	}
	releaseB()
	releaseB() // twice is harmless
	assert.Equal(t, []int{2, 3}, <-got)
	releaseA()

	none, release, err := l.Acquire(ctx, 0)
	require.NoError(t, err)
	assert.Empty(t, none)
	release()
}

func TestAcquireRefusesAndCancels(t *testing.T) {
	l := NewLocal(2)
	_, _, err := l.Acquire(context.Background(), 3)
	assert.ErrorContains(t, err, "needs 3 devices and this host has 2")

	_, release, err := l.Acquire(context.Background(), 2)
	require.NoError(t, err)
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, _, err = l.Acquire(ctx, 1)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestDetectDevicesReadsCUDAVisibleDevices(t *testing.T) {
	tests := []struct {
		env  string
		want int
	}{
		{env: "0,1,2", want: 3},
		{env: "", want: 0},
		{env: "1,-1,2", want: 1},
		{env: "GPU-8a1b, GPU-77c0", want: 2},
	}
	for _, tt := range tests {
		t.Setenv("CUDA_VISIBLE_DEVICES", tt.env)
		assert.Equal(t, tt.want, DetectDevices(), tt.env)
	}
}
