package fsdp

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Checkpoint file names inside a checkpoint directory.
const (
	// MetaFile describes a checkpoint of either kind; rank 0 writes it last, so a
	// directory without it holds no complete checkpoint.
	MetaFile = "meta.json"
	// FullFile holds a full checkpoint: per unit, the unpadded parameters, then
	// AdamW's m, then v, little-endian float32.
	FullFile = "full.bin"
)

// Checkpoint kinds recorded in CheckpointMeta.Kind.
const (
	KindSharded = "sharded"
	KindFull    = "full"
)

// checkpointFormat is bumped when the files change incompatibly.
const checkpointFormat = 1

// shardMagic opens every shard file, so a stray file is refused early.
var shardMagic = [8]byte{'F', 'S', 'D', 'P', 'S', 'H', 'R', 'D'}

// CheckpointMeta is meta.json: what a checkpoint holds and the run that wrote it.
type CheckpointMeta struct {
	Format int    `json:"format"`
	Kind   string `json:"kind"`
	// Step is the number of optimizer steps taken: AdamW's step count and the
	// index of the next global batch.
	Step int `json:"step"`
	// WorldSize, ShardGroupSize, Sharding and GPUsPerNode are the writer's layout;
	// a sharded checkpoint loads only into the same layout.
	WorldSize      int    `json:"world_size"`
	ShardGroupSize int    `json:"shard_group_size"`
	Sharding       string `json:"sharding"`
	GPUsPerNode    int    `json:"gpus_per_node,omitempty"`
	// GlobalBatch, SeqLen and Seed fix the data stream, which resuming continues.
	GlobalBatch int    `json:"global_batch"`
	SeqLen      int    `json:"seq_len"`
	Seed        uint64 `json:"seed"`
	// Units are the model's units as the writer split them.
	Units []UnitLayout `json:"units"`
}

// shardHeader is the JSON header of a shard file.
type shardHeader struct {
	Rank      int   `json:"rank"`
	Step      int   `json:"step"`
	ShardLens []int `json:"shard_lens"`
}

// meta is this trainer's description of a checkpoint of kind at its current step.
func (t *Trainer) meta(kind string) CheckpointMeta {
	m := CheckpointMeta{Format: checkpointFormat, Kind: kind, Step: t.step, WorldSize: t.world.Size(),
		ShardGroupSize: t.shardSize(), Sharding: t.cfg.Sharding, GlobalBatch: t.GlobalBatch(),
		SeqLen: t.cfg.SeqLen, Seed: t.cfg.Seed}
	if t.cfg.Sharding == sweeps.HybridShard {
		m.GPUsPerNode = t.cfg.GPUsPerNode
	}
	for i, u := range t.units {
		m.Units = append(m.Units, UnitLayout{Name: t.model.Units[i].Name, Size: u.size, Padded: u.padded, ShardLen: u.shardLen})
	}
	return m
}

// ready refuses checkpointing a trainer that failed and drops transient buffers,
// so only the shards hold state.
func (t *Trainer) ready(what string) error {
	if t.broken != nil {
		return fmt.Errorf("fsdp: rank %d: cannot %s: the trainer is unusable after an earlier error: %w", t.world.Rank(), what, t.broken)
	}
	t.release()
	return nil
}

// agree makes every rank return an error when any rank failed, so no rank goes on
// with a checkpoint that another rank did not write or load.
func (t *Trainer) agree(ctx context.Context, err error, what string) error {
	if t.world.Size() == 1 {
		return err
	}
	flag := []float32{0}
	if err != nil {
		flag[0] = 1
	}
	if cerr := t.world.AllReduce(ctx, flag, comm.Sum); cerr != nil {
		return errors.Join(err, fmt.Errorf("fsdp: rank %d: agree on %s: %w", t.world.Rank(), what, cerr))
	}
	if err != nil {
		return err
	}
	if flag[0] > 0 {
		return fmt.Errorf("fsdp: rank %d: %s failed on %.0f other rank(s); see their errors", t.world.Rank(), what, flag[0])
	}
	return nil
}

// SaveSharded writes this rank's shards (parameters, AdamW's m and v for every
// unit) to dir/shard-rank<r>.bin and, on rank 0, dir/meta.json. It is a
// collective: every rank calls it, between steps.
func (t *Trainer) SaveSharded(ctx context.Context, dir string) error {
	if err := t.ready("save a sharded checkpoint"); err != nil {
		return err
	}
	rank := t.world.Rank()
	err := t.writeShard(dir, rank)
	if err := t.agree(ctx, err, "writing the shard files"); err != nil {
		return err
	}
	if rank == 0 {
		err = writeMeta(dir, t.meta(KindSharded))
	}
	return t.agree(ctx, err, "writing "+MetaFile)
}

// shardPath is rank's shard file in dir.
func shardPath(dir string, rank int) string {
	return filepath.Join(dir, fmt.Sprintf("shard-rank%d.bin", rank))
}

func (t *Trainer) writeShard(dir string, rank int) error {
	h := shardHeader{Rank: rank, Step: t.step}
	for _, u := range t.units {
		h.ShardLens = append(h.ShardLens, u.shardLen)
	}
	hdr, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("fsdp: encode the shard header: %w", err)
	}
	return atomicWrite(shardPath(dir, rank), func(w io.Writer) error {
		if err := binary.Write(w, binary.LittleEndian, shardMagic); err != nil {
			return err
		}
		if err := binary.Write(w, binary.LittleEndian, uint32(len(hdr))); err != nil {
			return err
		}
		if _, err := w.Write(hdr); err != nil {
			return err
		}
		buf := make([]float32, 0)
		for _, u := range t.units {
			buf = slices.Grow(buf[:0], u.shardLen)[:u.shardLen]
			for _, b := range []device.Buffer{u.shard, u.m, u.v} {
				t.dev.CopyToHost(buf, b)
				if err := binary.Write(w, binary.LittleEndian, buf); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// LoadSharded restores what SaveSharded wrote into dir: every unit's shards, AdamW's
// step count and the data position, so the next Step trains on the global batch
// that would have come next. The checkpoint must come from the same world size,
// sharding, shard group and model; anything else is refused with an error and the
// trainer is left as it was. It is a collective: every rank calls it.
func (t *Trainer) LoadSharded(ctx context.Context, dir string) error {
	if err := t.ready("load a sharded checkpoint"); err != nil {
		return err
	}
	state, step, err := t.readShard(dir)
	if err := t.agree(ctx, err, "reading the sharded checkpoint in "+dir); err != nil {
		return err
	}
	// The agreement above is the order zero-copy gathers need (residentUnits):
	// every rank is between steps, none reads a gathered unit.
	t.hookWrite("load")
	for i, u := range t.units {
		for k, b := range []device.Buffer{u.shard, u.m, u.v} {
			t.dev.CopyFromHost(b, state[i][k])
		}
	}
	t.step = step
	return nil
}

// readShard reads and checks this rank's shard file against meta.json and the
// trainer: state[unit][param, m, v].
func (t *Trainer) readShard(dir string) ([][3][]float32, int, error) {
	rank := t.world.Rank()
	meta, err := readMeta(dir, KindSharded)
	if err != nil {
		return nil, 0, err
	}
	if err := t.sameLayout(meta, dir); err != nil {
		return nil, 0, err
	}
	path := shardPath(dir, rank)
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("fsdp: rank %d: open its shard: %w", rank, err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var magic [8]byte
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &magic); err != nil || magic != shardMagic {
		return nil, 0, fmt.Errorf("fsdp: %s is not a shard file written by SaveSharded", path)
	}
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil || n > 1<<24 {
		return nil, 0, fmt.Errorf("fsdp: %s: header length unreadable or too large (%d): the file is damaged", path, n)
	}
	hdr := make([]byte, n)
	var h shardHeader
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, 0, fmt.Errorf("fsdp: %s: read the header: %w", path, err)
	}
	if err := json.Unmarshal(hdr, &h); err != nil {
		return nil, 0, fmt.Errorf("fsdp: %s: decode the header: %w", path, err)
	}
	if h.Rank != rank || h.Step != meta.Step || len(h.ShardLens) != len(t.units) {
		return nil, 0, fmt.Errorf("fsdp: %s holds rank %d at step %d with %d units, but %s says step %d and this is rank %d with %d units: the directory mixes checkpoints; save again",
			path, h.Rank, h.Step, len(h.ShardLens), MetaFile, meta.Step, rank, len(t.units))
	}
	state := make([][3][]float32, len(t.units))
	for i, u := range t.units {
		if h.ShardLens[i] != u.shardLen {
			return nil, 0, fmt.Errorf("fsdp: %s: unit %d has %d elements per shard, this trainer %d", path, i, h.ShardLens[i], u.shardLen)
		}
		for k := range state[i] {
			state[i][k] = make([]float32, u.shardLen)
			if err := binary.Read(r, binary.LittleEndian, state[i][k]); err != nil {
				return nil, 0, fmt.Errorf("fsdp: %s: read unit %s: %w (the file is truncated or damaged)", path, t.model.Units[i].Name, err)
			}
		}
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return nil, 0, fmt.Errorf("fsdp: %s has bytes after the last unit: the file is damaged or from another model", path)
	}
	return state, meta.Step, nil
}

// sameLayout refuses a sharded checkpoint written by a different layout.
func (t *Trainer) sameLayout(m CheckpointMeta, dir string) error {
	mine := t.meta(KindSharded)
	var diffs []string
	check := func(what string, got, want any) {
		if got != want {
			diffs = append(diffs, fmt.Sprintf("%s %v (this run %v)", what, got, want))
		}
	}
	check("world size", m.WorldSize, mine.WorldSize)
	check("shard group size", m.ShardGroupSize, mine.ShardGroupSize)
	check("sharding", m.Sharding, mine.Sharding)
	check("gpus_per_node", m.GPUsPerNode, mine.GPUsPerNode)
	if !slices.Equal(m.Units, mine.Units) {
		diffs = append(diffs, fmt.Sprintf("unit layout %v (this run %v)", m.Units, mine.Units))
	}
	if err := t.sameData(m, mine); err != nil {
		diffs = append(diffs, err.Error())
	}
	if len(diffs) > 0 {
		return fmt.Errorf("fsdp: the sharded checkpoint in %s does not fit this run: %v; load it with the layout that wrote it, or save a full checkpoint (SaveFull) to change layouts", dir, diffs)
	}
	return nil
}

// sameData refuses a checkpoint whose data stream differs, since resuming it
// would not continue with the next global batch.
func (t *Trainer) sameData(m, mine CheckpointMeta) error {
	if m.GlobalBatch != mine.GlobalBatch || m.SeqLen != mine.SeqLen || m.Seed != mine.Seed {
		return fmt.Errorf("data stream global batch %d, seq_len %d, seed %d (this run %d, %d, %d)",
			m.GlobalBatch, m.SeqLen, m.Seed, mine.GlobalBatch, mine.SeqLen, mine.Seed)
	}
	return nil
}

// SaveFull consolidates the model on rank 0: each unit's parameters and AdamW
// moments are all-gathered over the shard group and rank 0 writes them unpadded to
// dir/full.bin, with dir/meta.json. LoadFull restores it at any world size and
// sharding. It is a collective: every rank calls it, between steps.
func (t *Trainer) SaveFull(ctx context.Context, dir string) error {
	if err := t.ready("save a full checkpoint"); err != nil {
		return err
	}
	rank := t.world.Rank()
	// Only rank 0's shard group gathers: the ranks 0..shardSize-1 under every
	// strategy (hybrid_shard's node 0, or the world).
	gathers := rank < t.shardSize()
	var werr error
	if rank == 0 {
		werr = atomicWrite(filepath.Join(dir, FullFile), func(w io.Writer) error { return t.gatherUnits(ctx, w) })
	} else if gathers {
		werr = t.gatherUnits(ctx, nil)
	}
	if err := t.agree(ctx, werr, "writing "+FullFile); err != nil {
		return err
	}
	var err error
	if rank == 0 {
		err = writeMeta(dir, t.meta(KindFull))
	}
	return t.agree(ctx, err, "writing "+MetaFile)
}

// gatherUnits gathers every unit's parameters, m and v and writes the unpadded
// tensors to w (nil on ranks other than 0). A failed write does not stop the
// gathers, which the other ranks of the group wait for.
func (t *Trainer) gatherUnits(ctx context.Context, w io.Writer) error {
	var werr error
	shard := make([]float32, 0)
	for i, u := range t.units {
		full := make([]float32, u.padded)
		shard = slices.Grow(shard[:0], u.shardLen)[:u.shardLen]
		for _, b := range []device.Buffer{u.shard, u.m, u.v} {
			if t.shard == nil {
				t.dev.CopyToHost(full, b)
			} else {
				t.dev.CopyToHost(shard, b)
				if err := t.shard.AllGather(ctx, full, shard); err != nil {
					return fmt.Errorf("fsdp: rank %d: all-gather unit %s for a full checkpoint: %w", t.world.Rank(), t.model.Units[i].Name, err)
				}
			}
			if w != nil && werr == nil {
				werr = binary.Write(w, binary.LittleEndian, full[:u.size])
			}
		}
	}
	return werr
}

// LoadFull restores a checkpoint that SaveFull wrote in dir, at this trainer's
// world size and sharding: rank 0 reads full.bin and broadcasts each unit, every
// rank keeps its shard. The model and the data stream (global batch, seq_len,
// seed) must match. It is a collective: every rank calls it. A failure after the
// checks, while units are being replaced, leaves the trainer unusable.
func (t *Trainer) LoadFull(ctx context.Context, dir string) error {
	if err := t.ready("load a full checkpoint"); err != nil {
		return err
	}
	rank := t.world.Rank()
	var (
		f    *os.File
		r    io.Reader
		step int
		err  error
	)
	if rank == 0 {
		f, step, err = t.openFull(dir)
		if f != nil {
			defer f.Close()
			r = bufio.NewReader(f)
		}
	}
	if err := t.agree(ctx, err, "checking the full checkpoint in "+dir); err != nil {
		return err
	}
	// The step travels as two exact 16-bit halves: float32 holds integers to 2^24.
	hdr := []float32{float32(step >> 16), float32(step & 0xffff)}
	if t.world.Size() > 1 {
		if err := t.world.Broadcast(ctx, hdr, 0); err != nil {
			t.broken = err
			return fmt.Errorf("fsdp: rank %d: broadcast the checkpoint's step: %w", rank, err)
		}
	}
	shardRank := 0
	if t.shard != nil {
		shardRank = t.shard.Rank()
	}
	// The agreement above is the order zero-copy gathers need (residentUnits):
	// every rank is between steps, none reads a gathered unit.
	t.hookWrite("load")
	var rerr error
	for i, u := range t.units {
		full := make([]float32, u.padded)
		for _, b := range []device.Buffer{u.shard, u.m, u.v} {
			if r != nil && rerr == nil {
				if err := binary.Read(r, binary.LittleEndian, full[:u.size]); err != nil {
					rerr = fmt.Errorf("fsdp: %s: read unit %s: %w", filepath.Join(dir, FullFile), t.model.Units[i].Name, err)
				}
			}
			if t.world.Size() > 1 {
				if err := t.world.Broadcast(ctx, full, 0); err != nil {
					t.broken = err
					return fmt.Errorf("fsdp: rank %d: broadcast unit %s of the full checkpoint: %w", rank, t.model.Units[i].Name, err)
				}
			}
			t.dev.CopyFromHost(b, full[shardRank*u.shardLen:(shardRank+1)*u.shardLen])
		}
	}
	if err := t.agree(ctx, rerr, "loading the full checkpoint in "+dir); err != nil {
		t.broken = err
		return err
	}
	t.step = int(hdr[0])<<16 | int(hdr[1])
	return nil
}

// openFull checks meta.json against the trainer and opens full.bin, checking its
// size.
func (t *Trainer) openFull(dir string) (*os.File, int, error) {
	meta, err := readMeta(dir, KindFull)
	if err != nil {
		return nil, 0, err
	}
	mine := t.meta(KindFull)
	var elems int64
	if len(meta.Units) != len(mine.Units) {
		return nil, 0, fmt.Errorf("fsdp: the full checkpoint in %s has %d units, this model %d: it is from another model", dir, len(meta.Units), len(mine.Units))
	}
	for i, u := range meta.Units {
		if u.Name != mine.Units[i].Name || u.Size != mine.Units[i].Size {
			return nil, 0, fmt.Errorf("fsdp: the full checkpoint in %s has unit %d %s of %d elements, this model %s of %d: it is from another model",
				dir, i, u.Name, u.Size, mine.Units[i].Name, mine.Units[i].Size)
		}
		elems += int64(u.Size)
	}
	if err := t.sameData(meta, mine); err != nil {
		return nil, 0, fmt.Errorf("fsdp: the full checkpoint in %s does not fit this run: %w; resuming continues its data stream, so keep them equal", dir, err)
	}
	path := filepath.Join(dir, FullFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("fsdp: open the full checkpoint: %w", err)
	}
	st, err := f.Stat()
	if err == nil && st.Size() != 3*4*elems {
		err = fmt.Errorf("fsdp: %s has %d bytes, its %s says %d: the file is truncated or damaged", path, st.Size(), MetaFile, 3*4*elems)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if meta.Step < 0 || meta.Step >= 1<<32 {
		f.Close()
		return nil, 0, fmt.Errorf("fsdp: %s: step %d is out of range", filepath.Join(dir, MetaFile), meta.Step)
	}
	return f, meta.Step, nil
}

// writeMeta writes dir/meta.json atomically.
func writeMeta(dir string, m CheckpointMeta) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("fsdp: encode %s: %w", MetaFile, err)
	}
	return atomicWrite(filepath.Join(dir, MetaFile), func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// readMeta reads dir/meta.json and checks its format and kind.
func readMeta(dir, kind string) (CheckpointMeta, error) {
	path := filepath.Join(dir, MetaFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return CheckpointMeta{}, fmt.Errorf("fsdp: read the checkpoint description: %w (is %s a complete checkpoint?)", err, dir)
	}
	var m CheckpointMeta
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("fsdp: decode %s: %w", path, err)
	}
	if m.Format != checkpointFormat {
		return m, fmt.Errorf("fsdp: %s has format %d, this build reads %d", path, m.Format, checkpointFormat)
	}
	if m.Kind != kind {
		return m, fmt.Errorf("fsdp: %s describes a %s checkpoint, not a %s one; use the matching Load", path, m.Kind, kind)
	}
	return m, nil
}

// atomicWrite writes path through a temporary file in the same directory and
// renames it into place, so a reader sees the old file or the whole new one.
func atomicWrite(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("fsdp: create the checkpoint directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("fsdp: create a temporary file for %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if err := write(w); err != nil {
		return fmt.Errorf("fsdp: write %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("fsdp: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsdp: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("fsdp: close %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("fsdp: move %s into place: %w", path, err)
	}
	return nil
}
