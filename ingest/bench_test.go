package ingest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// flatTOML is a job.toml of n flat keys (k0 = 0 ...), about 9 bytes a key:
// 115,000 of them fill the 1 MiB a TOML config may have.
func flatTOML(n int) string {
	var b strings.Builder
	b.WriteString("[training]\nlocal_batch_size = 2\n")
	for i := range n {
		fmt.Fprintf(&b, "k%d=%d\n", i, i%10)
	}
	return b.String()
}

// BenchmarkIngestFlatTOML ingests a folder whose job.toml holds 115,000 flat
// keys (1 MiB, the bound), the cost a hostile folder can ask for once per config
// file, and eight such files (the most a folder's configs may be): it must stay
// linear in the keys (one file took 36 s of CPU).
func BenchmarkIngestFlatTOML(b *testing.B) {
	for _, tc := range []struct{ keys, files int }{{30_000, 1}, {115_000, 1}, {115_000, maxConfigFiles}} {
		b.Run(fmt.Sprintf("%dkeys×%dfiles", tc.keys, tc.files), func(b *testing.B) {
			root := b.TempDir()
			dir := writeRunB(b, root, tc.keys, tc.files)
			for b.Loop() {
				if _, err := Ingest(context.Background(), []string{dir}, filepath.Join(b.TempDir(), "out"), Options{Name: "x"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// writeRunB writes a run folder of a seed-style metrics.json and files TOML
// files of n flat keys each.
func writeRunB(b *testing.B, root string, n, files int) string {
	b.Helper()
	dir := filepath.Join(root, "run")
	texts := map[string]string{"metrics.json": `{"wall_time_s": 1.0, "approx_tokens_per_rank": 100, "world_size": 2}`}
	for i := range files {
		texts[fmt.Sprintf("job%d.toml", i)] = flatTOML(n)
	}
	for name, text := range texts {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}
