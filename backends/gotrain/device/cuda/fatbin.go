package cuda

// fatbinImage is the kernels' fatbin. Until the kernels package embeds it
// (kernels.Fatbin), the device loads a placeholder that only the fake libcuda
// accepts; a real driver fails New with CUDA_ERROR_INVALID_IMAGE.
var fatbinImage = []byte("fsdpbench: kernels fatbin pending")
