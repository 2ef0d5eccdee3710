package rendezvous

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Info
	}{
		{
			name: "torchrun, two nodes of two",
			env: map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
				"GROUP_RANK": "1", "MASTER_ADDR": "node01", "MASTER_PORT": "29500"},
			want: Info{Source: SourceTorchrun, Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, NodeRank: 1,
				MasterAddr: "node01", MasterPort: 29500},
		},
		{
			name: "by hand: local variables default to one node",
			env:  map[string]string{"RANK": "2", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234"},
			want: Info{Source: SourceTorchrun, Rank: 2, WorldSize: 3, LocalRank: 2, LocalWorldSize: 3, NodeRank: 0,
				MasterAddr: "127.0.0.1", MasterPort: 1234},
		},
		{
			name: "torchrun wins inside an srun step",
			env: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1",
				"SLURM_PROCID": "5"},
			want: Info{Source: SourceTorchrun, Rank: 0, WorldSize: 1, LocalRank: 0, LocalWorldSize: 1, MasterAddr: "h", MasterPort: 1},
		},
		{
			name: "slurm with --ntasks-per-node, address from the step's node list",
			env: map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
				"SLURM_NTASKS_PER_NODE": "2", "SLURM_STEP_NODELIST": "node[01-04,07],gpu5", "SLURM_JOB_NODELIST": "other1",
				"SLURM_JOB_ID": "123456"},
			want: Info{Source: SourceSlurm, Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 2, NodeRank: 2,
				MasterAddr: "node01", MasterPort: slurmDefaultPortBase + 123456%10000},
		},
		{
			name: "slurm with an uneven tasks-per-node list and explicit master",
			env: map[string]string{"SLURM_PROCID": "6", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0", "SLURM_NODEID": "3",
				"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_JOB_NODELIST": "n[1-4]",
				"MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "4000"},
			want: Info{Source: SourceSlurm, Rank: 6, WorldSize: 7, LocalRank: 0, LocalWorldSize: 1, NodeRank: 3,
				MasterAddr: "10.0.0.9", MasterPort: 4000},
		},
		{
			name: "old slurm: SLURM_NPROCS and SLURM_JOBID",
			env: map[string]string{"SLURM_PROCID": "0", "SLURM_NPROCS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
				"SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_NODELIST": "a,b", "SLURM_JOBID": "77"},
			want: Info{Source: SourceSlurm, Rank: 0, WorldSize: 2, LocalRank: 0, LocalWorldSize: 1, NodeRank: 0,
				MasterAddr: "a", MasterPort: slurmDefaultPortBase + 77},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromEnv(mapEnv(tt.env))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	torch := func(over map[string]string) map[string]string {
		m := map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
		for k, v := range over {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	slurm := func(over map[string]string) map[string]string {
		m := map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
			"SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "42"}
		for k, v := range over {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	tests := []struct {
		name string
		env  map[string]string
		want []string // substrings of the error
	}{
		{"nothing set", map[string]string{}, []string{"neither RANK nor SLURM_PROCID", "torchrun", "srun"}},
		{"no MASTER_ADDR", torch(map[string]string{"MASTER_ADDR": ""}), []string{"MASTER_ADDR is not set", "torchrun sets it"}},
		{"no MASTER_PORT", torch(map[string]string{"MASTER_PORT": ""}), []string{"MASTER_PORT is not set"}},
		{"no RANK", torch(map[string]string{"RANK": ""}), []string{"RANK is not set"}},
		{"rank out of range", torch(map[string]string{"RANK": "2"}), []string{"RANK=2 is out of range for WORLD_SIZE=2"}},
		{"bad world size", torch(map[string]string{"WORLD_SIZE": "0"}), []string{`WORLD_SIZE="0" is not a positive integer`}},
		{"bad port", torch(map[string]string{"MASTER_PORT": "70000"}), []string{"MASTER_PORT=70000 is not a TCP port"}},
		{"bad local rank", torch(map[string]string{"LOCAL_RANK": "x"}), []string{`LOCAL_RANK="x"`}},
		{"local rank out of range", torch(map[string]string{"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "1"}), []string{"LOCAL_RANK=1 is out of range"}},
		{"slurm without ntasks", slurm(map[string]string{"SLURM_NTASKS": ""}), []string{"SLURM_NTASKS is not set", "srun sets it"}},
		{"slurm without localid", slurm(map[string]string{"SLURM_LOCALID": ""}), []string{"SLURM_LOCALID is not set"}},
		{"slurm without tasks per node", slurm(map[string]string{"SLURM_TASKS_PER_NODE": ""}), []string{"SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE is set"}},
		{"slurm node beyond the tasks list", slurm(map[string]string{"SLURM_NODEID": "2"}), []string{"SLURM_TASKS_PER_NODE", "lists 2 nodes, but this is node 2"}},
		{"slurm bad node list", slurm(map[string]string{"SLURM_JOB_NODELIST": "n[1-"}), []string{"SLURM_JOB_NODELIST", "never closed", "MASTER_ADDR"}},
		{"slurm without a node list", slurm(map[string]string{"SLURM_JOB_NODELIST": ""}), []string{"neither MASTER_ADDR nor SLURM_STEP_NODELIST"}},
		{"slurm without job id or port", slurm(map[string]string{"SLURM_JOB_ID": ""}), []string{"MASTER_PORT is not set", "SLURM_JOB_ID"}},
		{"slurm rank beyond ntasks", slurm(map[string]string{"SLURM_PROCID": "9"}), []string{"SLURM_PROCID=9 is out of range for SLURM_NTASKS=2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromEnv(mapEnv(tt.env))
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestStoreAddr(t *testing.T) {
	assert.Equal(t, "node01:29500", Info{MasterAddr: "node01", MasterPort: 29500}.StoreAddr())
	assert.Equal(t, "[::1]:29500", Info{MasterAddr: "::1", MasterPort: 29500}.StoreAddr())
}
