package comm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
)

// benchBytes is the buffer of one collective in the benchmarks: the all-gather's
// output, the all-reduce's buffer, and what the plain copy moves.
const benchBytes = 64 << 20

// reportBusBW reports nccl-tests' figures: algbw = bytes / time, and busbw = algbw ×
// factor, the figure that compares with a link's bandwidth.
func reportBusBW(b *testing.B, iters int, factor float64) {
	algbw := float64(benchBytes) * float64(iters) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(algbw, "algbw-GB/s")
	b.ReportMetric(algbw*factor, "busbw-GB/s")
}

// BenchmarkAllGatherRing gathers 64 MiB (64/size MiB per rank) around an in-process
// ring on loopback; busbw = algbw × (n−1)/n.
func BenchmarkAllGatherRing(b *testing.B) {
	for _, size := range []int{2, 4} {
		b.Run(fmt.Sprintf("ws=%d", size), func(b *testing.B) {
			comms := newGroup(b, size, Options{})
			n := benchBytes / 4 / size
			src, dst := make([][]float32, size), make([][]float32, size)
			for r := range size {
				src[r], dst[r] = rankData(r, n), make([]float32, n*size)
			}
			b.SetBytes(benchBytes)
			iters := 0
			for b.Loop() {
				run(b, comms, func(r int, c Communicator) error { return c.AllGather(context.Background(), dst[r], src[r]) })
				iters++
			}
			reportBusBW(b, iters, float64(size-1)/float64(size))
		})
	}
}

// BenchmarkAllReduceRing all-reduces a 64 MiB buffer; busbw = algbw × 2(n−1)/n.
func BenchmarkAllReduceRing(b *testing.B) {
	for _, size := range []int{2, 4} {
		b.Run(fmt.Sprintf("ws=%d", size), func(b *testing.B) {
			comms := newGroup(b, size, Options{})
			bufs := make([][]float32, size)
			for r := range size {
				bufs[r] = rankData(r, benchBytes/4)
			}
			b.SetBytes(benchBytes)
			iters := 0
			for b.Loop() {
				run(b, comms, func(r int, c Communicator) error { return c.AllReduce(context.Background(), bufs[r], Average) })
				iters++
			}
			reportBusBW(b, iters, 2*float64(size-1)/float64(size))
		})
	}
}

// BenchmarkLoopbackTCPCopy is the yardstick for the ring: io.Copy of the same 64 MiB
// over one loopback TCP connection into a receiving buffer, on the same machine in
// the same run. Its GB/s compares with the ring's busbw.
func BenchmarkLoopbackTCPCopy(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		conn net.Conn
		err  error
	}
	accepted := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		accepted <- result{conn, err}
	}()
	out, err := net.Dial("tcp", "127.0.0.1:"+fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	a := <-accepted
	if a.err != nil {
		b.Fatal(a.err)
	}
	in := a.conn
	defer in.Close()

	src := floatBytes(rankData(0, benchBytes/4))
	dst := make([]byte, benchBytes)
	b.SetBytes(benchBytes)
	iters := 0
	for b.Loop() {
		read := make(chan error, 1)
		go func() {
			_, err := io.ReadFull(in, dst)
			read <- err
		}()
		if _, err := io.Copy(out, bytes.NewReader(src)); err != nil {
			b.Fatal(err)
		}
		if err := <-read; err != nil {
			b.Fatal(err)
		}
		iters++
	}
	b.ReportMetric(float64(benchBytes)*float64(iters)/b.Elapsed().Seconds()/1e9, "GB/s")
}
