package sweeps

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const setSpec = `name: setspec
seq_len: 512
base:
  world_size: 2
  mixed_precision: fp32
grid:
  sharding: [full_shard, shard_grad_op, ddp]
  batch_per_device: [1, 2]
`

func TestSet(t *testing.T) {
	tests := []struct {
		name  string
		sets  []string
		runs  int
		check func(t *testing.T, p *Plan)
	}{
		{
			name: "a list replaces a grid axis in place",
			sets: []string{"sharding=full_shard,no_shard"},
			runs: 4,
			check: func(t *testing.T, p *Plan) {
				assert.Equal(t, []string{"sharding", "batch_per_device"}, p.Axes[:2])
				assert.Equal(t, NoShard, p.Runs[2].Sharding)
			},
		},
		{
			name: "one value replaces a top-level setting",
			sets: []string{"seq_len=1024"},
			runs: 6,
			check: func(t *testing.T, p *Plan) {
				for _, rc := range p.Runs {
					assert.Equal(t, 1024, rc.SeqLen)
				}
			},
		},
		{
			name: "a list turns a top-level setting into an axis",
			sets: []string{"seq_len=1024,2048"},
			runs: 12,
			check: func(t *testing.T, p *Plan) {
				assert.Equal(t, []string{"sharding", "batch_per_device", "seq_len"}, p.Axes[:3])
				assert.Equal(t, 2048, p.Runs[1].SeqLen, "the new axis is the last, fastest")
			},
		},
		{
			name: "a list turns a base value into an axis",
			sets: []string{"world_size=1,2,4"},
			runs: 18,
			check: func(t *testing.T, p *Plan) {
				assert.Equal(t, []int{1, 2, 4}, []int{p.Runs[0].WorldSize, p.Runs[1].WorldSize, p.Runs[2].WorldSize})
			},
		},
		{
			name: "one value replaces a grid axis",
			sets: []string{"sharding=ddp"},
			runs: 2,
			check: func(t *testing.T, p *Plan) {
				assert.Equal(t, DDP, p.Runs[1].Sharding)
				assert.Equal(t, FP32, p.Runs[1].MixedPrecision)
			},
		},
		{
			name: "brackets make a list, even of one",
			sets: []string{"activation_checkpointing=[true]", "cpu_offload=[false, true]"},
			runs: 12,
			check: func(t *testing.T, p *Plan) {
				assert.True(t, p.Runs[0].ActivationCheckpointing)
				assert.Contains(t, p.Axes, "cpu_offload")
			},
		},
		{
			name: "settings and options",
			sets: []string{"steps=5", "name=other", "timeout=2m", "backend_options.inter_node_bus_bw_gbps=40", "backend_options.net.ib=false", "launcher_options.partition=gpu"},
			runs: 6,
			check: func(t *testing.T, p *Plan) {
				rc := p.Runs[0]
				assert.Equal(t, "other", p.Name)
				assert.Equal(t, 5, rc.Steps)
				assert.Equal(t, "2m0s", rc.Timeout.String())
				assert.Equal(t, map[string]any{"inter_node_bus_bw_gbps": int64(40), "net": map[string]any{"ib": false}}, rc.BackendOptions)
				assert.Equal(t, map[string]any{"partition": "gpu"}, rc.LauncherOptions)
			},
		},
		{
			name: "later flags win",
			sets: []string{"sharding=ddp", "sharding=no_shard,ddp"},
			runs: 4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := parse(t, setSpec, tt.sets...)
			assert.Len(t, p.Runs, tt.runs)
			if tt.check != nil {
				tt.check(t, p)
			}
			again, err := Parse(p.Resolved, "sweep.yaml", Options{})
			require.NoError(t, err, "%s", p.Resolved)
			assert.Equal(t, p.Runs, again.Runs, "the resolved spec holds the overrides")
		})
	}
}

func TestSetErrors(t *testing.T) {
	tests := []struct {
		name      string
		sets      []string
		line, col int
		want      string
		exact     bool
	}{
		{name: "unknown key", sets: []string{"shardng=ddp"}, line: 1, col: 1, want: `unknown key "shardng" (allowed: the axes`},
		{name: "unknown key suggests", sets: []string{"steps=3", "grad_acum=2"}, line: 2, col: 1, want: "did you mean grad_accum?"},
		{name: "typo in a value", sets: []string{"sharding=full_shard,full_shrad"}, line: 1, col: 21, exact: true,
			want: `unknown sharding "full_shrad" (allowed: full_shard, shard_grad_op, hybrid_shard, no_shard, ddp; did you mean full_shard?)`},
		{name: "string for a number", sets: []string{"seq_len='1024'"}, line: 1, col: 9, want: `seq_len must be a positive integer (at most 16777216), got the string "1024" (remove the quotes)`, exact: true},
		{name: "zero", sets: []string{"world_size=0"}, line: 1, col: 12, want: "world_size must be a positive integer (at most 131072), got 0", exact: true},
		{name: "no equals sign", sets: []string{"sharding"}, line: 1, col: 1, want: `--set "sharding": expected key=value`},
		{name: "no value", sets: []string{"sharding="}, line: 1, col: 10, want: "no value after '='"},
		{name: "empty list item", sets: []string{"world_size=1,,2"}, line: 1, col: 14, want: "empty value in the list"},
		{name: "empty list", sets: []string{"sharding=[]"}, line: 1, col: 10, want: "an empty list gives no values"},
		{name: "empty list of a structural key", sets: []string{"exclude=[]"}, line: 1, col: 9, want: "an empty list gives no values"},
		{name: "a list for a setting", sets: []string{"steps=10,20"}, line: 1, col: 7, want: "steps takes one value, not a list"},
		{name: "structural key", sets: []string{"grid=x"}, line: 1, col: 1, want: "grid cannot be set with --set"},
		{name: "options need a name", sets: []string{"backend_options=3"}, line: 1, col: 1, want: "set one option at a time: --set backend_options.NAME=VALUE"},
		{name: "dotted axis", sets: []string{"base.sharding=ddp"}, line: 1, col: 1, want: `unknown key "base.sharding"`},
		{name: "combination made invalid", sets: []string{"sharding=hybrid_shard"}, line: 1, col: 10, want: "hybrid_shard needs nodes >= 2"},
		{name: "key after spaces", sets: []string{"  shardng=ddp"}, line: 1, col: 3, want: `unknown key "shardng"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := specError(t, setSpec, Options{Set: tt.sets})
			assert.Equal(t, "--set", se.File)
			assert.Equal(t, [2]int{tt.line, tt.col}, [2]int{se.Line, se.Column}, se.Msg)
			if tt.exact {
				assert.Equal(t, tt.want, se.Msg)
			} else {
				assert.Contains(t, se.Msg, tt.want)
			}
		})
	}
}

func TestSetScalarTypes(t *testing.T) {
	tests := []struct {
		in   string
		want any
	}{
		{"8", int64(8)}, {"-3", int64(-3)}, {"true", true}, {"False", false}, {"2.5", 2.5},
		{"1e3", 1000.0}, {"ddp", "ddp"}, {"'8'", "8"}, {`"true"`, "true"}, {"size:1e8", "size:1e8"},
		{"~", nil}, {"inf", "inf"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, setScalar(tt.in, pos{}).val, tt.in)
	}
}
