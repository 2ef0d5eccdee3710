//go:build !cgo

package gotrain

// cgoEnabled says the test binary was built with cgo, which loading OpenBLAS,
// NCCL and the CUDA libraries needs.
const cgoEnabled = false
