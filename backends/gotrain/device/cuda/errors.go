package cuda

import (
	"errors"
	"fmt"
)

// ErrNoDevice is wrapped by every error that means this machine cannot run the
// cuda device: no driver library, no cuBLAS, cuInit failing, no GPU.
var ErrNoDevice = errors.New("no CUDA device")

// cuResultNames names the CUDA driver's CUresult codes (cuda.h's cudaError_enum).
// The table is ours rather than cuGetErrorName's: the toolkit's stub libcuda answers
// CUDA_ERROR_STUB_LIBRARY (34) to every call, cuGetErrorName included, and a driver
// too old for a code has no name for it. errors_test.go checks it against cuda.h.
var cuResultNames = map[int]string{
	0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
	3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED", 34: "CUDA_ERROR_STUB_LIBRARY",
	46: "CUDA_ERROR_DEVICE_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
	102: "CUDA_ERROR_DEVICE_NOT_LICENSED", 200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU", 214: "CUDA_ERROR_ECC_UNCORRECTABLE", 218: "CUDA_ERROR_INVALID_PTX",
	221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	300: "CUDA_ERROR_INVALID_SOURCE", 301: "CUDA_ERROR_FILE_NOT_FOUND", 304: "CUDA_ERROR_OPERATING_SYSTEM",
	400: "CUDA_ERROR_INVALID_HANDLE", 401: "CUDA_ERROR_ILLEGAL_STATE", 500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT", 709: "CUDA_ERROR_CONTEXT_IS_DESTROYED", 710: "CUDA_ERROR_ASSERT",
	714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS", 717: "CUDA_ERROR_INVALID_ADDRESS_SPACE", 718: "CUDA_ERROR_INVALID_PC",
	719: "CUDA_ERROR_LAUNCH_FAILED", 720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
	800: "CUDA_ERROR_NOT_PERMITTED", 801: "CUDA_ERROR_NOT_SUPPORTED", 802: "CUDA_ERROR_SYSTEM_NOT_READY",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	909: "CUDA_ERROR_TIMEOUT", 999: "CUDA_ERROR_UNKNOWN",
}

// cublasStatusNames names cuBLAS's cublasStatus_t codes (cublas_api.h).
var cublasStatusNames = map[int]string{
	0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// Result codes the device tests for.
const (
	cudaErrorOutOfMemory = 2
	cudaErrorStubLibrary = 34
	cudaErrorNoDevice    = 100
	cudaErrorNotReady    = 600
	// blasDriverError is what the shim returns instead of a cuBLAS status when
	// making the context current failed: 1000 + the CUresult.
	blasDriverError = 1000
)

// CUDAError is a failed driver call: which call and its CUresult.
type CUDAError struct {
	Call string
	Code int
}

// Error names the call, the code's name and its number.
func (e *CUDAError) Error() string {
	name, ok := cuResultNames[e.Code]
	if !ok {
		name = "unknown CUresult"
	}
	return fmt.Sprintf("%s: %s (%d)", e.Call, name, e.Code)
}

// BLASError is a failed cuBLAS call.
type BLASError struct {
	Call   string
	Status int
}

// Error names the call, the status's name and its number.
func (e *BLASError) Error() string {
	name, ok := cublasStatusNames[e.Status]
	if !ok {
		name = "unknown cublasStatus_t"
	}
	return fmt.Sprintf("%s: %s (%d)", e.Call, name, e.Status)
}

// cuErr returns nil for CUDA_SUCCESS and a *CUDAError otherwise.
func cuErr(call string, code int) error {
	if code == 0 {
		return nil
	}
	return &CUDAError{Call: call, Code: code}
}

// blasErr returns nil for CUBLAS_STATUS_SUCCESS, a *CUDAError when the shim could
// not make the context current, and a *BLASError otherwise.
func blasErr(call string, status int) error {
	switch {
	case status == 0:
		return nil
	case status >= blasDriverError:
		return &CUDAError{Call: call + " (make the context current)", Code: status - blasDriverError}
	}
	return &BLASError{Call: call, Status: status}
}
