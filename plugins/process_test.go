package plugins

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTailKeepsThePanicAndTheEnd(t *testing.T) {
	tl := &tail{max: 32}
	for _, line := range []string{`{"@level":"debug","@message":"plugin address"}`, "starting", strings.Repeat("x", 40), "last words"} {
		_, _ = tl.Write([]byte(line + "\n"))
	}
	assert.Equal(t, "xxxxxxxxxxxxxxxxxxxx | last words", tl.String(), "hclog lines dropped, the last max bytes kept")

	_, _ = tl.Write([]byte("panic: boom\n\ngoroutine 1 [running]:\nmain.f()\n\t/x.go:3\nmain.main()\n\t/x.go:9\nmore\nmore\n"))
	assert.Equal(t, "panic: boom | goroutine 1 [running]: | main.f() | /x.go:3 | main.main() | /x.go:9", tl.String())
}

func TestGateDropsWritesOnceClosed(t *testing.T) {
	var b strings.Builder
	g := &gate{w: &b}
	_, _ = g.Write([]byte("a"))
	g.close()
	n, err := g.Write([]byte("b"))
	assert.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, "a", b.String())
}
