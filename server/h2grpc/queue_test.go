package h2grpc

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// pipeListener accepts the server ends of net.Pipe connections. A write on
// a pipe blocks until the other end reads, so what the server gathers stays
// unwritten for as long as the test's client does not read.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

// startPipe is start over a pipeListener: it serves svcDesc with opts and
// returns the server, the service and the client's end of one connection, with a
// deadline of 20 s on it.
func startPipe(t *testing.T, opts Options) (*Server, *svc, net.Conn) {
	t.Helper()
	srv := NewServer(opts)
	impl := newSvc()
	srv.RegisterService(&svcDesc, impl)
	lis := newPipeListener()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	nc := lis.dial()
	t.Cleanup(func() {
		nc.Close()
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	if err := nc.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return srv, impl, nc
}

// poisonPool overwrites every buffer given back to it, as the chunk store
// does under PoisonRecycled, and as the buffer's next owner would: bytes
// written from a freed buffer show up as poisonByte.
type poisonPool struct{ freed chan struct{} }

const poisonByte = 0xa5

func (p *poisonPool) Get(n int) *[]byte { b := make([]byte, n); return &b }

func (p *poisonPool) Put(b *[]byte) {
	for i := range *b {
		(*b)[i] = poisonByte
	}
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// poisonCodec marshals each message into one buffer of its pool.
type poisonCodec struct {
	encoding.CodecV2
	pool *poisonPool
}

func (c poisonCodec) Marshal(v any) (mem.BufferSlice, error) {
	d, err := c.CodecV2.Marshal(v)
	if err != nil {
		return nil, err
	}
	b := c.pool.Get(d.Len())
	d.CopyTo(*b)
	d.Free()
	return mem.BufferSlice{mem.NewBuffer(b, c.pool)}, nil
}

// A client resets a stream whose second message the stream's window cut:
// the first part of that message is gathered for the writer, by reference,
// and not yet written. Its buffer must not be freed (and so reused) before
// the writer has written that part. Found by review: the reset freed it at
// once, and the DATA frame then carried whatever the buffer held next, in
// reverie a reused response buffer or another chunk's bytes.
func TestResetKeepsGatheredBytesUntilWritten(t *testing.T) {
	pool := &poisonPool{freed: make(chan struct{}, 1)}
	_, impl, nc := startPipe(t, Options{Codec: poisonCodec{CodecV2: encoding.GetCodecV2("proto"), pool: pool}})
	fr := http2.NewFramer(nc, nc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	go func() { // the pipe blocks writes until the server reads them
		io.WriteString(nc, http2.ClientPreface)
		fr.WriteSettings()
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + svcName + "/Flood"}, {"content-type", "application/grpc"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true, EndStream: true})
		// Flood has now queued messages of 32 KiB; the stream's window of
		// 65535 bytes let all of the first through and cut the second.
		// Nothing is written yet: the client reads nothing until after
		// the reset. SendMsg gathers what the window lets through before
		// it returns, so once Flood has sent two messages the second is
		// cut (a loaded machine can be slow to get there).
		for deadline := time.Now().Add(10 * time.Second); impl.sent.Load() < 2 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
		fr.WriteRSTStream(1, http2.ErrCodeCancel)
	}()
	select {
	case <-impl.ctxErrs: // Flood's SendMsg failed: the stream is closed
	case <-time.After(10 * time.Second):
		t.Fatal("Flood did not end after the reset")
	}
	select {
	case <-pool.freed:
	case <-time.After(10 * time.Second):
		t.Fatal("no response buffer was freed after the reset")
	}
	got := 0
	for got < 65535 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d bytes of DATA: %v", got, err)
		}
		if d, ok := f.(*http2.DataFrame); ok {
			if i := bytes.IndexByte(d.Data(), poisonByte); i >= 0 {
				t.Fatalf("DATA byte %d of the stream comes from a freed buffer", got+i)
			}
			got += len(d.Data())
		}
	}
}

// Requests the server answers at once, without a handler (here: an unknown
// service), count against the bound on what is queued for a client that
// does not read by what the answer takes, not by a guess. The answer names
// the path the client sent, percent-encoded (up to 3 bytes for each of
// its bytes), and HPACK lets the client repeat that path in a byte or two:
// counted as 64 bytes each, 41 KiB of requests once queued 28 MiB.
func TestEarlyAnswersCountAgainstControlBound(t *testing.T) {
	srv, _, nc := startPipe(t, Options{})
	const requests = 3000
	wrote := make(chan struct{})
	go func() { // stops at the first failed write, once the server has gone
		defer close(wrote)
		fr := http2.NewFramer(nc, nil)
		if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
			return
		}
		if fr.WriteSettings() != nil {
			return
		}
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		path := "/" + strings.Repeat("\xff", 3900)
		for i := range requests {
			block.Reset()
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {"content-type", "application/grpc"}} {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block.Bytes(), EndHeaders: true, EndStream: true}) != nil {
				return
			}
		}
	}()
	// Read only once the server has queued what it would: it has read every
	// request, or its reader has ended the connection. It then flushes
	// what is queued for a second, so reading must start soon after. A
	// fixed wait was too short on a loaded machine, and reading early
	// drains the queue the test is about.
	c := connOf(t, srv)
	for deadline := time.Now().Add(15 * time.Second); !c.locked(func() bool { return c.closed }) && time.Now().Before(deadline); {
		select {
		case <-wrote:
			deadline = time.Time{}
		case <-time.After(2 * time.Millisecond):
		}
	}
	var fh [9]byte
	total, answers := 0, 0
	var goaway http2.ErrCode = 0xffff
	for goaway == 0xffff {
		if _, err := io.ReadFull(nc, fh[:]); err != nil {
			t.Fatalf("after %d bytes and %d answers, no GOAWAY: %v", total, answers, err)
		}
		n := int(fh[0])<<16 | int(fh[1])<<8 | int(fh[2])
		payload := make([]byte, n)
		if _, err := io.ReadFull(nc, payload); err != nil {
			t.Fatal(err)
		}
		total += 9 + n
		switch http2.FrameType(fh[3]) {
		case http2.FrameHeaders:
			if http2.Flags(fh[4])&http2.FlagHeadersEndStream != 0 {
				answers++
			}
		case http2.FrameGoAway:
			goaway = http2.ErrCode(binary.BigEndian.Uint32(payload[4:8]))
		}
	}
	nc.Close()
	<-wrote
	if goaway != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY with %v after %d answers, want ENHANCE_YOUR_CALM", goaway, answers)
	}
	if answers >= requests || total > 2*maxControlBytes {
		t.Errorf("the server queued %d KiB (%d answers) for a client that reads nothing; the bound is %d KiB", total>>10, answers, maxControlBytes>>10)
	}
}

// countingPool is gRPC's default pool, counting what is taken and given
// back.
type countingPool struct {
	mem.BufferPool
	gets, puts atomic.Int64
}

func (p *countingPool) Get(n int) *[]byte { p.gets.Add(1); return p.BufferPool.Get(n) }
func (p *countingPool) Put(b *[]byte)     { p.puts.Add(1); p.BufferPool.Put(b) }

// The pieces of a message half read when its stream goes, whether the
// client resets it or the connection ends, go back to the pool. Before,
// they were left to the collector (found by review).
func TestHalfReadMessageReturnsToPool(t *testing.T) {
	pool := &countingPool{BufferPool: mem.DefaultBufferPool()}
	srv, _, addr := start(t, Options{Pool: pool})
	c := dialRaw(t, addr)
	conn := connOf(t, srv)
	half := func(id uint32) {
		c.headers(id, "/"+svcName+"/Block", false)
		// A message of 1 MiB announced, 40 KiB of it sent.
		prefix := []byte{0, 0, 0x10, 0, 0}
		c.fr.WriteData(id, false, append(prefix, make([]byte, 16<<10-5)...))
		c.fr.WriteData(id, false, make([]byte, 16<<10))
		c.fr.WriteData(id, false, make([]byte, 8<<10))
	}
	half(1)
	c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	half(3)
	// A PING's answer orders the frames before it: they have been read.
	c.fr.WritePing(false, [8]byte{1})
	c.until("PING ack", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck()
	})
	if got := pool.gets.Load(); got == 0 {
		t.Fatal("nothing taken from the pool: the test reads no message")
	}
	// The connection ends with stream 3 half read.
	c.nc.Close()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		srv.mu.Lock()
		_, open := srv.conns[conn]
		srv.mu.Unlock()
		if !open && pool.puts.Load() == pool.gets.Load() {
			return
		}
	}
	t.Errorf("%d buffers taken from the pool, %d given back", pool.gets.Load(), pool.puts.Load())
}

// Answers that the connection's window stops are sent, whole, as the
// client grows it: the streams it stopped wait in order for the next
// connection-level WINDOW_UPDATE, and each such update pumps only them.
func TestConnectionWindowStopsAndResumes(t *testing.T) {
	_, addr := startBig(t, Options{})
	c := dialRaw(t, addr)
	// Stream windows that never stop the answers: only the connection's
	// window of 65,535 bytes does.
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	const calls = 3
	for i := range calls {
		id := uint32(2*i + 1)
		c.headers(id, "/h2grpc.test.Big/Get", false)
		if err := c.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint32]int{}
	ended := map[uint32]bool{}
	total := 0
	read := func(until func() bool) {
		t.Helper()
		for !until() {
			f, err := c.fr.ReadFrame()
			if err != nil {
				t.Fatalf("after %d bytes of DATA: %v", total, err)
			}
			switch f := f.(type) {
			case *http2.DataFrame:
				got[f.StreamID] += len(f.Data())
				total += len(f.Data())
			case *http2.MetaHeadersFrame:
				if f.StreamEnded() {
					ended[f.StreamID] = true
				}
			}
		}
	}
	read(func() bool { return total == 65535 })
	// In steps smaller than an answer, so that streams stop again.
	answer := 512<<10 + 5 + 1 + 3 // the bytes, the prefix, and the BytesValue's tag and length
	for total < calls*answer {
		step := min(100_000, calls*answer-total)
		if err := c.fr.WriteWindowUpdate(0, uint32(step)); err != nil {
			t.Fatal(err)
		}
		want := total + step
		read(func() bool { return total >= want })
		if total != want {
			t.Fatalf("%d bytes of DATA after a window of %d", total, want)
		}
	}
	read(func() bool { return len(ended) == calls })
	for i := range calls {
		if id := uint32(2*i + 1); got[id] != answer {
			t.Errorf("stream %d: %d bytes of DATA, want %d", id, got[id], answer)
		}
	}
}
