package sim

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// DefaultStorageBWGBps is the storage bandwidth a checkpoint is written and read
// at when backend_options.storage_bw_gbps is not given: GB/s per node, shared by
// its ranks. 4 GB/s is the order of one datacenter PCIe Gen4 NVMe drive's
// sequential write (the DGX H100's local cache is 8 such 3.84 TB U.2 drives in
// RAID 0, NVIDIA DGX H100 User Guide); a parallel file system gives a node tens
// of GB/s, a network home directory far less. Set your storage's figure (fio's
// sequential write, or a gotrain run's checkpoint_bytes / checkpoint_save_s).
const DefaultStorageBWGBps = 4.0

// Bounds of storage_bw_gbps: from a slow network disk to past any node's NICs.
const (
	minStorageBWGBps = 0.01
	maxStorageBWGBps = 10000
)

const storageBWHelp = "checkpoint write and read bandwidth per node, GB/s in [0.01, 10000], shared by the node's ranks; default 4 (one PCIe Gen4 NVMe drive)"

func setStorageBW(o *Options, v any) error {
	f, err := backends.NumberIn(v, minStorageBWGBps, maxStorageBWGBps, false)
	o.StorageBW = f * 1e9
	return err
}

// The checkpoint format of the Go trainer (backends/gotrain/fsdp/checkpoint.go,
// format 1), which the sim predicts byte for byte: a sharded checkpoint is one
// file per rank (an 8-byte magic, a uint32 header length, the JSON header, then
// per unit the shard's parameters, AdamW m and v as float32) and meta.json on
// rank 0; a full one is full.bin on rank 0 (per unit the unpadded parameters, m
// and v) and meta.json. The types below mirror the trainer's JSON; the sim
// cannot import the trainer (its tests compare against the sim), and a gotrain
// test checks that the bytes agree with the files a real run writes.
const (
	gotrainCkptFormat  = 1
	shardMagicBytes    = 8
	shardHeaderLenSize = 4
	ckptStateCopies    = 3 // parameters, AdamW m, v
	float32Bytes       = 4
)

type ckptUnit struct {
	Name                   string
	Size, Padded, ShardLen int
}

type ckptMeta struct {
	Format         int        `json:"format"`
	Kind           string     `json:"kind"`
	Step           int        `json:"step"`
	WorldSize      int        `json:"world_size"`
	ShardGroupSize int        `json:"shard_group_size"`
	Sharding       string     `json:"sharding"`
	GPUsPerNode    int        `json:"gpus_per_node,omitempty"`
	GlobalBatch    int        `json:"global_batch"`
	SeqLen         int        `json:"seq_len"`
	Seed           uint64     `json:"seed"`
	Units          []ckptUnit `json:"units"`
}

type ckptShardHeader struct {
	Rank      int   `json:"rank"`
	Step      int   `json:"step"`
	ShardLens []int `json:"shard_lens"`
}

// CheckpointBytes is what the Go trainer writes for rc's last checkpoint: total
// over all ranks and the largest rank's share (rank 0's, which also writes
// meta.json). Zero when rc does not checkpoint.
func CheckpointBytes(rc sweeps.RunConfig, s shapes.Shape) (total, largest int64, err error) {
	if !rc.Checkpoints() {
		return 0, 0, nil
	}
	if err := rc.CheckCheckpoint(); err != nil {
		return 0, 0, err
	}
	group := 1
	switch rc.Sharding {
	case sweeps.FullShard, sweeps.ShardGradOp:
		group = rc.WorldSize
	case sweeps.HybridShard:
		group = rc.GPUsPerNode
	}
	// The trainer's units: the embedding, one per layer, and the head (the final
	// norm and the LM head).
	embedding := int64(s.Vocab) * int64(s.Hidden)
	if s.Arch == shapes.ArchGPT2 {
		embedding += int64(s.MaxPositions) * int64(s.Hidden)
	}
	units := []ckptUnit{{Name: "embedding", Size: int(embedding)}}
	for i := range s.Layers {
		units = append(units, ckptUnit{Name: "layers." + strconv.Itoa(i), Size: int(s.BlockParams())})
	}
	units = append(units, ckptUnit{Name: "head", Size: int(s.Params() - embedding - int64(s.Layers)*s.BlockParams())})
	var elems int64
	lens := make([]int, len(units))
	for i := range units {
		u := &units[i]
		u.Padded = (u.Size + group - 1) / group * group
		u.ShardLen = u.Padded / group
		lens[i] = u.ShardLen
		elems += int64(u.Size)
	}
	// The last save follows the last multiple of checkpoint_every; the trainer's
	// step counts the warm-up steps too.
	step := rc.WarmupSteps + rc.Steps/rc.CheckpointEvery*rc.CheckpointEvery
	m := ckptMeta{Format: gotrainCkptFormat, Kind: rc.Checkpoint, Step: step, WorldSize: rc.WorldSize,
		ShardGroupSize: group, Sharding: rc.Sharding, GlobalBatch: rc.GlobalBatch, SeqLen: rc.SeqLen,
		Seed: uint64(rc.Seed), Units: units}
	if rc.Sharding == sweeps.HybridShard {
		m.GPUsPerNode = rc.GPUsPerNode
	}
	meta, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return 0, 0, fmt.Errorf("sim: encode the checkpoint's meta.json: %w", err)
	}
	metaBytes := int64(len(meta)) + 1 // and a newline
	if rc.Checkpoint == sweeps.CheckpointFull {
		total = ckptStateCopies*float32Bytes*elems + metaBytes
		return total, total, nil
	}
	shard, err := shardFileBytes(step, lens, 0)
	if err != nil {
		return 0, 0, err
	}
	// Every rank's file is rank 0's but for the digits of its rank in the header.
	total = int64(rc.WorldSize)*shard + metaBytes
	for lo := 10; lo < rc.WorldSize; lo *= 10 {
		total += int64(rc.WorldSize - lo)
	}
	return total, shard + metaBytes, nil
}

// shardFileBytes is the size of rank's shard file.
func shardFileBytes(step int, shardLens []int, rank int) (int64, error) {
	hdr, err := json.Marshal(ckptShardHeader{Rank: rank, Step: step, ShardLens: shardLens})
	if err != nil {
		return 0, fmt.Errorf("sim: encode a shard header: %w", err)
	}
	var elems int64
	for _, n := range shardLens {
		elems += int64(n)
	}
	return int64(shardMagicBytes+shardHeaderLenSize+len(hdr)) + ckptStateCopies*float32Bytes*elems, nil
}

// fillCheckpoint adds the checkpoint figures to a prediction's result: the
// bytes the Go trainer writes (CheckpointBytes) and the time to move them at the
// storage bandwidth (storage_bw_gbps, per node, its ranks sharing it). A sharded
// save is every node writing its ranks' files at once; a full one first gathers
// the parameters and AdamW moments (fp32) to rank 0 over the collective links,
// then rank 0 writes them all. A load mirrors the save (rank 0 reads and
// broadcasts a full checkpoint), at the same bandwidth.
func fillCheckpoint(res *results.Result, rc sweeps.RunConfig, opts Options, pred Prediction) error {
	if !rc.Checkpoints() {
		return nil
	}
	total, largest, err := CheckpointBytes(rc, pred.Shape)
	if err != nil {
		return err
	}
	bw := opts.StorageBW
	if bw == 0 {
		bw = DefaultStorageBWGBps * 1e9
	}
	var save, load float64
	if rc.Checkpoint == sweeps.CheckpointFull {
		state := float64(ckptStateCopies*float32Bytes) * float64(pred.Shape.Params())
		inter := rc.Nodes > 1
		flat := pred.Hardware.IntraNodeBusBWBytesPerS
		if inter {
			flat = pred.Hardware.InterNodeBusBWBytesPerS
		}
		move := ringTime(state, rc.WorldSize, false, opts.Links.busBW(inter, "all_gather", state, flat))
		save = move + float64(total)/bw
		load = float64(total)/bw + move
	} else {
		save = float64(rc.GPUsPerNode) * float64(largest) / bw
		load = save
	}
	res.CheckpointBytes, res.CheckpointBytesPerRank = results.I64(total), results.I64(largest)
	res.CheckpointSaveS = results.F64(save)
	if rc.ResumeCheck {
		// Whether resuming is exact is a measurement; the sim leaves it unknown.
		res.CheckpointLoadS = results.F64(load)
	}
	return nil
}
