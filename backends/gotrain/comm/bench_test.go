package comm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"
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

// BenchmarkAllGather gathers 64 MiB (64/size MiB per rank) among in-process ranks,
// over the TCP ring on loopback and over shared memory; busbw = algbw × (n−1)/n.
func BenchmarkAllGather(b *testing.B) {
	for _, tr := range transports {
		for _, size := range []int{2, 4} {
			b.Run(fmt.Sprintf("%s/ws=%d", tr, size), func(b *testing.B) {
				comms := newGroup(b, size, Options{Transport: tr})
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
}

// BenchmarkReduceScatter reduce-scatters 64 MiB (64/size MiB per rank out), as
// FSDP reduces gradients; busbw = algbw × (n−1)/n.
func BenchmarkReduceScatter(b *testing.B) {
	for _, tr := range transports {
		for _, size := range []int{2, 4} {
			b.Run(fmt.Sprintf("%s/ws=%d", tr, size), func(b *testing.B) {
				comms := newGroup(b, size, Options{Transport: tr})
				n := benchBytes / 4 / size
				src, dst := make([][]float32, size), make([][]float32, size)
				for r := range size {
					src[r], dst[r] = rankData(r, n*size), make([]float32, n)
				}
				b.SetBytes(benchBytes)
				iters := 0
				for b.Loop() {
					run(b, comms, func(r int, c Communicator) error {
						return c.ReduceScatter(context.Background(), dst[r], src[r], Average)
					})
					iters++
				}
				reportBusBW(b, iters, float64(size-1)/float64(size))
			})
		}
	}
}

// BenchmarkAllReduce all-reduces a 64 MiB buffer; busbw = algbw × 2(n−1)/n.
func BenchmarkAllReduce(b *testing.B) {
	for _, tr := range transports {
		for _, size := range []int{2, 4} {
			b.Run(fmt.Sprintf("%s/ws=%d", tr, size), func(b *testing.B) {
				comms := newGroup(b, size, Options{Transport: tr})
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
}

// BenchmarkLoopbackTCPCopy is the yardstick for both transports: io.Copy of the
// same 64 MiB over one loopback TCP connection into a receiving buffer, on the
// same machine in the same run. Its GB/s compares with the collectives' busbw.
func BenchmarkLoopbackTCPCopy(b *testing.B) {
	cp := newLoopbackCopy(b)
	b.SetBytes(benchBytes)
	iters := 0
	for b.Loop() {
		cp.run(b)
		iters++
	}
	b.ReportMetric(float64(benchBytes)*float64(iters)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkAllGatherVsTCPCopy measures, interleaved in every iteration so that a
// machine's changing load weighs on all alike, the loopback TCP copy of 64 MiB, a
// plain in-process copy of 64 MiB (memcpy, the bound of any copying path), the
// all-gather of 64 MiB on the TCP ring and on shared memory through the rounds
// (copying, src a private buffer), and the all-gather that the trainer runs on
// shared memory: into one gathered buffer of the shared arena (AllocShared),
// each rank's shard a private buffer copied into its piece ("shm-shared"), and
// the in-place all-gather of fsdp's zero-copy gathers ("shm-inplace": each
// rank's shard is its piece of one resident buffer, nccl-tests' in-place
// all-gather on a node-shared output). It reports each one's GB/s (busbw for
// the all-gathers) and the ratios of the all-gathers' busbw to the TCP copy's
// GB/s. fill-busbw is the bound of shm-shared: every rank's goroutine copying
// its shard into one private 64 MiB buffer at once, no barriers (what the
// machine's memory bandwidth allows). shm-inplace moves no bytes at all: it is
// one barrier, and its "busbw" is the bytes made visible to every rank per unit
// of time by the formula of the others, bound by the barrier's latency, not by
// memory; it compares with the others only as what the trainer's gather costs.
//
// Run it with
//
//	go test ./backends/gotrain/comm -run '^$' -bench AllGatherVsTCPCopy -benchtime 20x
func BenchmarkAllGatherVsTCPCopy(b *testing.B) {
	for _, size := range []int{2, 4} {
		b.Run(fmt.Sprintf("ws=%d", size), func(b *testing.B) {
			cp := newLoopbackCopy(b)
			groups := map[string][]Communicator{}
			for _, tr := range transports {
				groups[tr] = newGroup(b, size, Options{Transport: tr})
			}
			n := benchBytes / 4 / size
			src, dst, shared, resident := make([][]float32, size), make([][]float32, size), make([][]float32, size), make([][]float32, size)
			for r := range size {
				src[r], dst[r] = rankData(r, n), make([]float32, n*size)
				sg := groups[TransportShm][r].(SharedGatherer)
				var ok, ok2 bool
				shared[r], ok = sg.AllocShared(n * size)
				resident[r], ok2 = sg.AllocShared(n * size)
				if !ok || !ok2 {
					b.Fatal("the shared arena has no room for 2×64 MiB")
				}
				copy(resident[r][r*n:(r+1)*n], src[r]) // the shard lives in its piece
			}
			const sharedName, inPlaceName = "shm-shared", "shm-inplace"
			kinds := append(slices.Clone(transports), sharedName, inPlaceName)
			fill := make([]float32, n*size)
			var copyTime, memcpyTime, fillTime time.Duration
			gatherTime := map[string]time.Duration{}
			iters := 0
			for warm := true; warm || b.Loop(); warm = false {
				// The first round is not timed: it faults in the pages of every
				// buffer (a trainer reuses its arena, step after step) and grows
				// the sockets' buffers.
				start := time.Now()
				cp.run(b)
				copyTime += time.Since(start)
				start = time.Now()
				copy(cp.dst, cp.src)
				memcpyTime += time.Since(start)
				start = time.Now()
				eachRank(size, func(r int) error { copy(fill[r*n:(r+1)*n], src[r]); return nil })
				fillTime += time.Since(start)
				for _, k := range kinds {
					comms, out, in := groups[k], dst, src
					switch k {
					case sharedName:
						comms, out = groups[TransportShm], shared
					case inPlaceName:
						comms, out, in = groups[TransportShm], resident, make([][]float32, size)
						for r := range size {
							in[r] = resident[r][r*n : (r+1)*n]
						}
					}
					start := time.Now()
					run(b, comms, func(r int, c Communicator) error { return c.AllGather(context.Background(), out[r], in[r]) })
					gatherTime[k] += time.Since(start)
				}
				if warm {
					copyTime, memcpyTime, fillTime = 0, 0, 0
					clear(gatherTime)
					continue
				}
				iters++
			}
			for r := range size {
				requireSame(b, src[r], shared[(r+1)%size][r*n:(r+1)*n], "the shared buffer's piece")
				requireSame(b, src[r], resident[(r+1)%size][r*n:(r+1)*n], "the resident buffer's piece")
			}
			gbs := func(d time.Duration) float64 { return float64(benchBytes) * float64(iters) / d.Seconds() / 1e9 }
			copyGBs := gbs(copyTime)
			b.ReportMetric(copyGBs, "tcp-copy-GB/s")
			b.ReportMetric(gbs(memcpyTime), "memcpy-GB/s")
			b.ReportMetric(gbs(fillTime)*float64(size-1)/float64(size), "fill-busbw-GB/s")
			for _, k := range kinds {
				busbw := gbs(gatherTime[k]) * float64(size-1) / float64(size)
				b.ReportMetric(busbw, k+"-busbw-GB/s")
				b.ReportMetric(busbw/copyGBs, k+"/copy")
			}
		})
	}
}

// loopbackCopy is one loopback TCP connection and the 64 MiB it carries.
type loopbackCopy struct {
	out, in  net.Conn
	src, dst []byte
}

func newLoopbackCopy(b *testing.B) *loopbackCopy {
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
	out, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { out.Close() })
	a := <-accepted
	if a.err != nil {
		b.Fatal(a.err)
	}
	b.Cleanup(func() { a.conn.Close() })
	return &loopbackCopy{out: out, in: a.conn, src: floatBytes(rankData(0, benchBytes/4)), dst: make([]byte, benchBytes)}
}

// run copies src to dst over the connection once.
func (cp *loopbackCopy) run(b *testing.B) {
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(cp.in, cp.dst)
		read <- err
	}()
	if _, err := io.Copy(cp.out, bytes.NewReader(cp.src)); err != nil {
		b.Fatal(err)
	}
	if err := <-read; err != nil {
		b.Fatal(err)
	}
}
