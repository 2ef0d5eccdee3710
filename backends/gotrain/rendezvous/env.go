// Package rendezvous tells a gotrain worker who it is and who its peers are: it reads
// the launcher's environment (torchrun's or Slurm's variables) into an Info, and runs
// the small TCP store through which the ranks of a job exchange the addresses of
// their collective-communication listeners (rank 0 serves it on MASTER_ADDR:MASTER_PORT,
// like torch's TCPStore).
package rendezvous

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Launchers an Info can come from.
const (
	SourceTorchrun = "torchrun"
	SourceSlurm    = "slurm"
)

// Info is one worker's place in the job.
type Info struct {
	// Source is SourceTorchrun or SourceSlurm: which set of variables was read.
	Source string `json:"source"`
	// Rank is the global rank, 0 ≤ Rank < WorldSize.
	Rank      int `json:"rank"`
	WorldSize int `json:"world_size"`
	// LocalRank is the rank among the workers of this node, 0 ≤ LocalRank < LocalWorldSize.
	LocalRank      int `json:"local_rank"`
	LocalWorldSize int `json:"local_world_size"`
	// NodeRank is the index of this node (torchrun's GROUP_RANK, Slurm's SLURM_NODEID).
	NodeRank int `json:"node_rank"`
	// MasterAddr and MasterPort are where rank 0 serves the rendezvous store.
	MasterAddr string `json:"master_addr"`
	MasterPort int    `json:"master_port"`
}

// StoreAddr is MASTER_ADDR:MASTER_PORT in the form net.Dial takes.
func (i Info) StoreAddr() string {
	return net.JoinHostPort(i.MasterAddr, strconv.Itoa(i.MasterPort))
}

// slurmDefaultPortBase follows PyTorch Lightning's SLURMEnvironment: without
// MASTER_PORT, the port is 15000 plus the last four digits of the job id, so that two
// jobs sharing a first node rarely collide and every task of one job agrees.
const slurmDefaultPortBase = 15000

// FromEnv reads the worker's Info from environment variables through env (os.Getenv
// in production, a map in tests). torchrun's variables win when both sets are
// present (torchrun started inside an srun step): RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT are required; LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK default to a
// single node (LOCAL_RANK = RANK) as torch's env:// initialisation allows.
// Otherwise Slurm's: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, the
// tasks per node (SLURM_NTASKS_PER_NODE, or this node's entry of
// SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE such as "2(x3),1"), MASTER_ADDR or
// else the first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST, MASTER_PORT or else
// 15000 + the last four digits of SLURM_JOB_ID.
func FromEnv(env func(string) string) (Info, error) {
	switch {
	case env("RANK") != "" || env("WORLD_SIZE") != "":
		return torchrunInfo(env)
	case env("SLURM_PROCID") != "":
		return slurmInfo(env)
	default:
		return Info{}, fmt.Errorf("rendezvous: neither RANK nor SLURM_PROCID is set: start workers with torchrun " +
			"(it sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), inside an srun step " +
			"(it sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...), or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT by hand")
	}
}

const torchrunHint = "torchrun sets it for every worker; when launching by hand set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT"

func torchrunInfo(env func(string) string) (Info, error) {
	r := envReader{env: env, hint: torchrunHint}
	info := Info{Source: SourceTorchrun}
	info.WorldSize = r.positive("WORLD_SIZE")
	info.Rank = r.nonNegative("RANK")
	info.MasterAddr = r.required("MASTER_ADDR")
	info.MasterPort = r.port("MASTER_PORT")
	if r.err != nil {
		return Info{}, r.err
	}
	info.LocalRank = r.optionalNonNegative("LOCAL_RANK", info.Rank)
	info.LocalWorldSize = r.optionalPositive("LOCAL_WORLD_SIZE", info.WorldSize)
	info.NodeRank = r.optionalNonNegative("GROUP_RANK", info.Rank/max(info.LocalWorldSize, 1))
	if r.err != nil {
		return Info{}, r.err
	}
	return info, validate(info, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
}

const slurmHint = "srun sets it in every task of a job step; run the workers with srun, not directly in an sbatch script"

func slurmInfo(env func(string) string) (Info, error) {
	r := envReader{env: env, hint: slurmHint}
	info := Info{Source: SourceSlurm}
	info.Rank = r.nonNegative("SLURM_PROCID")
	if env("SLURM_NTASKS") == "" && env("SLURM_NPROCS") != "" {
		info.WorldSize = r.positive("SLURM_NPROCS") // older Slurm
	} else {
		info.WorldSize = r.positive("SLURM_NTASKS")
	}
	info.LocalRank = r.nonNegative("SLURM_LOCALID")
	info.NodeRank = r.nonNegative("SLURM_NODEID")
	if r.err != nil {
		return Info{}, r.err
	}

	switch {
	case env("SLURM_NTASKS_PER_NODE") != "":
		info.LocalWorldSize = r.positive("SLURM_NTASKS_PER_NODE")
	default:
		name := firstSet(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
		if name == "" {
			return Info{}, fmt.Errorf("rendezvous: none of SLURM_NTASKS_PER_NODE, SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE is set (%s)", slurmHint)
		}
		n, err := TasksOnNode(env(name), info.NodeRank)
		if err != nil {
			return Info{}, fmt.Errorf("rendezvous: %s=%q (node %d from SLURM_NODEID): %w", name, env(name), info.NodeRank, err)
		}
		info.LocalWorldSize = n
	}

	if addr := env("MASTER_ADDR"); addr != "" {
		info.MasterAddr = addr
	} else {
		name := firstSet(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
		if name == "" {
			return Info{}, fmt.Errorf("rendezvous: neither MASTER_ADDR nor SLURM_STEP_NODELIST / SLURM_JOB_NODELIST is set: " +
				"set MASTER_ADDR to the host of rank 0, or run inside a Slurm allocation")
		}
		host, err := FirstHost(env(name))
		if err != nil {
			return Info{}, fmt.Errorf("rendezvous: %s=%q: %w (set MASTER_ADDR to override)", name, env(name), err)
		}
		info.MasterAddr = host
	}

	if env("MASTER_PORT") != "" {
		info.MasterPort = r.port("MASTER_PORT")
	} else {
		job := env("SLURM_JOB_ID")
		if job == "" {
			job = env("SLURM_JOBID")
		}
		id, err := strconv.ParseUint(job, 10, 64)
		if err != nil {
			return Info{}, fmt.Errorf("rendezvous: MASTER_PORT is not set and SLURM_JOB_ID=%q is not a job number to derive it from: set MASTER_PORT", job)
		}
		info.MasterPort = slurmDefaultPortBase + int(id%10000)
	}
	if r.err != nil {
		return Info{}, r.err
	}
	return info, validate(info, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "tasks per node")
}

// validate checks the ranks against the sizes, naming the variables they came from.
func validate(i Info, rank, size, localRank, localSize string) error {
	if i.Rank >= i.WorldSize {
		return fmt.Errorf("rendezvous: %s=%d is out of range for %s=%d (ranks are 0..%d)", rank, i.Rank, size, i.WorldSize, i.WorldSize-1)
	}
	if i.LocalRank >= i.LocalWorldSize {
		return fmt.Errorf("rendezvous: %s=%d is out of range for %s=%d", localRank, i.LocalRank, localSize, i.LocalWorldSize)
	}
	if i.LocalWorldSize > i.WorldSize {
		return fmt.Errorf("rendezvous: %s=%d is larger than %s=%d", localSize, i.LocalWorldSize, size, i.WorldSize)
	}
	return nil
}

func firstSet(env func(string) string, names ...string) string {
	for _, n := range names {
		if env(n) != "" {
			return n
		}
	}
	return ""
}

// envReader parses variables and keeps the first error, so that a reader can read
// several and check once.
type envReader struct {
	env  func(string) string
	hint string
	err  error
}

func (r *envReader) required(name string) string {
	v := strings.TrimSpace(r.env(name))
	if v == "" && r.err == nil {
		r.err = fmt.Errorf("rendezvous: %s is not set (%s)", name, r.hint)
	}
	return v
}

func (r *envReader) integer(name string, lo int, what string) int {
	v := r.required(name)
	if r.err != nil {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo {
		r.err = fmt.Errorf("rendezvous: %s=%q is not %s", name, v, what)
		return 0
	}
	return n
}

func (r *envReader) nonNegative(name string) int { return r.integer(name, 0, "a non-negative integer") }
func (r *envReader) positive(name string) int    { return r.integer(name, 1, "a positive integer") }

func (r *envReader) port(name string) int {
	p := r.integer(name, 1, "a TCP port (1..65535)")
	if r.err == nil && p > 65535 {
		r.err = fmt.Errorf("rendezvous: %s=%d is not a TCP port (1..65535)", name, p)
	}
	return p
}

func (r *envReader) optionalNonNegative(name string, def int) int {
	if strings.TrimSpace(r.env(name)) == "" {
		return def
	}
	return r.nonNegative(name)
}

func (r *envReader) optionalPositive(name string, def int) int {
	if strings.TrimSpace(r.env(name)) == "" {
		return def
	}
	return r.positive(name)
}
