package results

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRulesFileBounded is issue 13 §3: a 1 KB alias bomb given to `gate --rules`
// took 3.3 GB (×9 per extra level); /dev/zero never returned. Both are refused at
// once, with little memory.
func TestRulesFileBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n  - &a0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 9; i++ {
		prev := "*a" + strconv.Itoa(i-1)
		b.WriteString("  - &a" + strconv.Itoa(i) + " [" + strings.Repeat(prev+", ", 8) + prev + "]\n")
	}
	bomb := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(bomb, []byte(b.String()), 0o644))
	require.Less(t, b.Len(), 1024)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := LoadRules(bomb)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules.yaml:7:10: the rules file expands to more than 100000 values once its aliases (*name) are expanded")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(32<<20))
	assert.Less(t, took, 5*time.Second)

	_, err = LoadRules("/dev/zero")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a rules file must be a regular file, but this is a character device")
}
