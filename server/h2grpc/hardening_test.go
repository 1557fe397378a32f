package h2grpc

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ping sends PING data and reads frames until its ACK: every frame the
// client sent before it has been read by the server.
func (c *rawClient) ping(data [8]byte) {
	c.t.Helper()
	if err := c.fr.WritePing(false, data); err != nil {
		c.t.Fatal(err)
	}
	c.until("PING ack", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck() && p.Data == data
	})
}

// Streams a client opens and resets without ever sending DATA are
// forgotten as frames arrive. They used to be kept until a DATA frame
// came, which such a client never sends: about 28 bytes from it kept a
// stream of the server's (found by review).
func TestResetStreamsWithoutDataAreForgotten(t *testing.T) {
	srv, _, addr := start(t, Options{})
	c := dialRaw(t, addr)
	const n = 200
	for i := range n {
		id := uint32(2*i + 1)
		c.headers(id, "/"+svcName+"/Chat", false)
		if err := c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			t.Fatal(err)
		}
	}
	cn := connOf(t, srv)
	for deadline := time.Now().Add(10 * time.Second); !cn.locked(func() bool { return len(cn.streams) == 0 }); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the streams were not closed")
		}
	}
	c.ping([8]byte{1})
	var kept int
	cn.locked(func() bool { kept = len(cn.removed); return true })
	if kept > 0 {
		t.Fatalf("%d of %d reset streams kept after the next frame", kept, n)
	}
}

// A second GOAWAY, after streams refused while draining, must not name a
// higher last stream than the first (RFC 9113, 6.8).
func TestGoAwayLastIDNeverRises(t *testing.T) {
	srv, _, addr := start(t, Options{})
	c := dialRaw(t, addr)
	c.headers(1, "/"+svcName+"/Chat", false) // open: the drain waits for it
	c.ping([8]byte{2})
	go srv.GracefulStop()
	var first uint32
	c.until("the drain's GOAWAY", func(f http2.Frame) bool {
		g, ok := f.(*http2.GoAwayFrame)
		if ok {
			first = g.LastStreamID
		}
		return ok
	})
	c.headers(3, "/"+svcName+"/Chat", false) // refused while draining
	c.reset("stream 3 refused", 3, http2.ErrCodeRefusedStream)
	c.fr.WriteRawFrame(http2.FrameData, 0, 0, []byte("x")) // a connection error
	c.until("the error's GOAWAY", func(f http2.Frame) bool {
		g, ok := f.(*http2.GoAwayFrame)
		if ok && g.LastStreamID > first {
			t.Fatalf("GOAWAY names stream %d after an earlier one named %d", g.LastStreamID, first)
		}
		return ok
	})
}

// A second HEADERS without END_STREAM on an open stream is a malformed
// request: a stream error, not the end of every stream on the connection
// (RFC 9113, 8.1.1).
func TestSecondHeadersIsAStreamError(t *testing.T) {
	_, _, addr := start(t, Options{})
	c := dialRaw(t, addr)
	c.headers(1, "/"+svcName+"/Chat", false)
	c.headers(1, "/"+svcName+"/Chat", false)
	c.reset("stream 1 reset", 1, http2.ErrCodeProtocol)
	c.ping([8]byte{3}) // the connection lives on
}

// A stream whose handler reads nothing, sent a window's worth of empty
// messages (5 bytes each on the wire, a buffer and a slot each in the
// server), is reset once it holds too many unread.
func TestTinyMessagesAreBounded(t *testing.T) {
	_, _, addr := start(t, Options{})
	c := dialRaw(t, addr)
	c.headers(1, "/"+svcName+"/Block", false)
	frame := make([]byte, 16380) // 3,276 empty messages
	for range 10 {
		if err := c.fr.WriteData(1, false, frame); err != nil {
			t.Fatal(err)
		}
	}
	c.reset("stream 1 reset", 1, http2.ErrCodeEnhanceYourCalm)
	c.ping([8]byte{4})
}

// The send queue of a stream whose client reads a little slower than its
// handler sends, so that it never empties, stays small: the parts already
// sent are dropped from it.
func TestSendQueueStaysSmall(t *testing.T) {
	srv, impl, addr := start(t, Options{})
	c := dialRaw(t, addr)
	c.headers(1, "/"+svcName+"/Flood", false)
	if err := c.fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	cn := connOf(t, srv)
	longest := 0
	for impl.sent.Load() < 2000 {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		d, ok := f.(*http2.DataFrame)
		if !ok || len(d.Data()) == 0 {
			continue
		}
		// Grant what was read, no more: the handler stays ahead.
		c.fr.WriteWindowUpdate(0, uint32(len(d.Data())))
		c.fr.WriteWindowUpdate(1, uint32(len(d.Data())))
		cn.locked(func() bool {
			if s := cn.streams[1]; s != nil {
				longest = max(longest, len(s.sendq))
			}
			return true
		})
	}
	if longest > 256 {
		t.Fatalf("the send queue grew to %d parts over %d messages", longest, impl.sent.Load())
	}
}

// A client that grants windows without end and never reads its socket
// gets no more than the bound on what is gathered for the writer (plus the
// batch being written and a stream's send queue): the handler then blocks
// in SendMsg. Before the bound the server gathered DATA for it until
// memory ran out.
func TestUnreadSocketIsBounded(t *testing.T) {
	srv, impl, nc := startPipe(t, Options{})
	fr := http2.NewFramer(nc, nc)
	go func() { // the pipe blocks writes until the server reads them
		io.WriteString(nc, http2.ClientPreface)
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		fr.WriteWindowUpdate(0, 1<<31-1-65535)
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + svcName + "/Flood"}, {"content-type", "application/grpc"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true, EndStream: true})
		// Nothing is read: the server's writer blocks on its first write.
	}()
	const limit = 2000 // 64 MiB of 32 KiB messages
	last, still := int64(-1), time.Now()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := impl.sent.Load()
		if n >= limit {
			t.Fatalf("Flood sent %d messages of 32 KiB to a client that reads nothing", n)
		}
		if n != last {
			last, still = n, time.Now()
		} else if n > 0 && time.Since(still) > 500*time.Millisecond {
			t.Logf("Flood stopped at %d messages", n)
			cn := connOf(t, srv)
			var queued int
			cn.locked(func() bool { queued = cn.queued; return true })
			if queued > maxOutQueued+maxFrame+1024 {
				t.Fatalf("%d bytes gathered for the writer, over the bound %d", queued, maxOutQueued)
			}
			return
		}
	}
	t.Fatalf("Flood neither stopped nor passed the limit (sent %d)", impl.sent.Load())
}

// A stream whose handler does not read holds about two stream windows of
// a message, however large the message: the window used to be returned
// while the message being read grew, so that each such stream could take
// one message up to MaxRecvMsgSize (2 GiB by default) while its handler
// was busy elsewhere (found by review).
func TestHalfReadMessageIsBounded(t *testing.T) {
	const window = 64 << 10
	// PINGs mark what the server has read; many are sent.
	_, impl, addr := start(t, Options{StreamWindow: window, ConnWindow: 16 << 20, KeepaliveMinTime: time.Nanosecond})
	c := dialRaw(t, addr)
	c.headers(1, "/"+svcName+"/Block", false)
	waitStarted(t, impl)
	const size = 8 << 20
	if err := c.fr.WriteData(1, false, []byte{0, size >> 24, size >> 16 & 0xff, size >> 8 & 0xff, size & 0xff}); err != nil {
		t.Fatal(err)
	}
	streamWin, connWin := int64(window-5), int64(65535-5)
	sent := 0
	chunk := make([]byte, 16384)
	for round := byte(0); ; round++ {
		for streamWin > 0 && connWin > 0 && sent < size {
			n := int(min(int64(len(chunk)), streamWin, connWin, int64(size-sent)))
			if err := c.fr.WriteData(1, false, chunk[:n]); err != nil {
				t.Fatal(err)
			}
			sent += n
			streamWin -= int64(n)
			connWin -= int64(n)
		}
		// Every WINDOW_UPDATE the server sends for the frames above comes
		// before its answer to this PING.
		grew := false
		data := [8]byte{7, round}
		if err := c.fr.WritePing(false, data); err != nil {
			t.Fatal(err)
		}
		c.until("PING ack", func(f http2.Frame) bool {
			switch f := f.(type) {
			case *http2.WindowUpdateFrame:
				if f.StreamID == 1 {
					streamWin += int64(f.Increment)
					grew = true
				} else if f.StreamID == 0 {
					connWin += int64(f.Increment)
				}
			case *http2.PingFrame:
				return f.IsAck() && f.Data == data
			}
			return false
		})
		if sent == size || (!grew && streamWin <= 0) {
			break
		}
	}
	if sent > 2*window+2*16384 {
		t.Fatalf("the server let the client send %d bytes of one message to a handler that reads none, over a %d-byte window", sent, window)
	}
	t.Logf("%d bytes sent before the window closed", sent)
}

// A message many times the stream window still arrives when the handler
// waits for it.
func TestMessageLargerThanWindow(t *testing.T) {
	_, _, addr := start(t, Options{StreamWindow: 64 << 10})
	st, err := dial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20))).
		NewStream(ctxT(t), bidi, "/"+svcName+"/Chat")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{100, 1 << 20, 3 << 20} {
		in := &wrapperspb.BytesValue{Value: bytes.Repeat([]byte{byte(n)}, n)}
		if err := st.SendMsg(in); err != nil {
			t.Fatal(err)
		}
		out := new(wrapperspb.BytesValue)
		if err := st.RecvMsg(out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(in.Value, out.Value) {
			t.Fatalf("%d bytes sent, %d received back", n, len(out.Value))
		}
	}
}

// sizePool counts the bytes it has handed out and not taken back.
type sizePool struct {
	mem.BufferPool
	out atomic.Int64
}

func (p *sizePool) Get(n int) *[]byte { p.out.Add(int64(n)); return p.BufferPool.Get(n) }
func (p *sizePool) Put(b *[]byte)     { p.out.Add(-int64(cap(*b))); p.BufferPool.Put(b) }

// openTinyStarts opens n streams and sends on each the length prefix of a
// 4 MiB message and one byte of it: 6 bytes of DATA.
func openTinyStarts(c *rawClient, n int) {
	for i := range n {
		id := uint32(2*i + 1)
		c.headers(id, "/"+svcName+"/Chat", false)
		if err := c.fr.WriteData(id, false, []byte{0, 0x00, 0x40, 0x00, 0x00, 'x'}); err != nil {
			c.t.Fatal(err)
		}
	}
	c.ping([8]byte{9})
}

// What the server allocates for messages follows what arrives of them. The
// first byte of a message used to get a buffer of the whole message (up to
// 4 MiB), or the whole chunk body Options.Split asked for: 64 streams of 6
// bytes each held 256 MiB (found by review).
func TestFirstBytesDoNotAllocateTheMessage(t *testing.T) {
	for _, withSplit := range []bool{false, true} {
		pool := &sizePool{BufferPool: mem.DefaultBufferPool()}
		opts := Options{Pool: pool}
		if withSplit {
			opts.Split = func(_ string, left int, _ []byte) (int, int, mem.BufferPool) {
				return 0, min(left, maxPiece), pool // the whole message as one body
			}
			opts.SplitMinBytes = 1
		}
		_, _, addr := start(t, opts)
		c := dialRaw(t, addr)
		const n = 64
		openTinyStarts(c, n)
		limit := int64(n * minPiece)
		if withSplit {
			limit += maxUnfilled
		}
		if got := pool.out.Load(); got > limit {
			t.Errorf("split %v: %d streams of 6 bytes hold %d MiB of buffers, want at most %d MiB",
				withSplit, n, got>>20, limit>>20)
		}
	}
}
