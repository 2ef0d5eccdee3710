package harness

import "strings"

// tuningEnvPrefixes name the variables that change how training runs (the
// collectives, threads, allocators, kernels): a run records those it
// inherited, as it records the ones the spec gave.
var tuningEnvPrefixes = []string{"NCCL_", "OMP_", "PYTORCH_", "CUDA_", "TORCH_", "GLOO_", "MKL_", "OPENBLAS_",
	"UCX_", "FI_", "CUBLAS_", "CUDNN_", "NVIDIA_TF32_"}

// maxInheritedEnv bounds how many inherited variables a run records.
const maxInheritedEnv = 64

// inheritedEnv returns the tuning variables of environ (KEY=VALUE) that given
// (the spec's env) does not set; nil when there are none. The harness's own
// CUDA_VISIBLE_DEVICES is left out: it records the devices elsewhere.
func inheritedEnv(environ []string, given map[string]string) map[string]string {
	var out map[string]string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if _, ok := given[k]; ok || k == "CUDA_VISIBLE_DEVICES" || len(out) >= maxInheritedEnv {
			continue
		}
		for _, p := range tuningEnvPrefixes {
			if strings.HasPrefix(k, p) {
				if out == nil {
					out = map[string]string{}
				}
				out[k] = v
				break
			}
		}
	}
	return out
}
