//go:build cgo

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseDriverVersion(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\nGCC version:  gcc version 12.2.0", "535.104.05"},
		{"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16)\n", "580.159.04"},
		{"", ""},
	} {
		assert.Equal(t, tc.want, parseDriverVersion(tc.text), tc.text)
	}
}

func TestErrorsSayTheCallAndTheName(t *testing.T) {
	assert.EqualError(t, cuErr("cuInit", 100), "cuInit: CUDA_ERROR_NO_DEVICE (100)")
	assert.EqualError(t, cuErr("cuX", 12345), "cuX: unknown CUresult (12345)")
	assert.NoError(t, cuErr("cuInit", 0))
	assert.EqualError(t, blasErr("cublasSgemm_v2", 13), "cublasSgemm_v2: CUBLAS_STATUS_EXECUTION_FAILED (13)")
	assert.EqualError(t, blasErr("cublasCreate_v2", blasDriverError+201), "cublasCreate_v2 (make the context current): CUDA_ERROR_INVALID_CONTEXT (201)")
}
