package h2grpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

const (
	// maxFrame is the largest frame the server accepts: HTTP/2's default,
	// which it does not raise.
	maxFrame = 16 << 10
	// readBufferBytes is the connection's read buffer. A 16 KiB DATA
	// frame is read from it into its message's buffer: one copy after the
	// kernel's. A smaller buffer, so that frames bypass it, costs a read
	// call per frame or two, which is more (bench/echo --read-buffer).
	readBufferBytes = 32 << 10
	// maxQueuedSend is how many bytes of a stream's messages may wait for
	// the client's flow-control windows before SendMsg blocks.
	maxQueuedSend = 1 << 20
	// maxControlBytes bounds the frames the server queues in answer to a
	// client's (PING and SETTINGS acknowledgements, resets) while the
	// client does not read them: a flood of them ends the connection.
	maxControlBytes = 1 << 20
	// maxOutQueued bounds the bytes gathered for the writer beyond the
	// batch it is writing: past it, streams stop gathering DATA until the
	// writer takes what is queued (their handlers then block in SendMsg).
	// Without it, a client that grants large windows and stops reading
	// its socket makes the server queue DATA for it without end.
	maxOutQueued = 8 << 20
	// maxPiece is the largest buffer one message is read into; a longer
	// message is read into several, allocated as its bytes arrive, so that
	// a length prefix alone does not make the server allocate gigabytes.
	maxPiece = 4 << 20
	// minPiece is the first buffer of a message read in pieces; each
	// piece after it is as large as what the message has filled so far
	// (up to maxPiece), so that what is allocated follows what arrives.
	minPiece = 16 << 10
	// maxUnfilled bounds the room given to messages on one connection
	// ahead of their bytes. Past it, a piece is only as large as the rest
	// of the frame being read, and no message is cut into buffers of
	// Options.Split's (whose bodies are allocated whole): a client that
	// sends the first bytes of many large messages cannot make the
	// server allocate their full sizes.
	maxUnfilled = 16 << 20
	// userTimeout is how long data the server sent may go unacknowledged
	// before the kernel resets the connection (TCP_USER_TIMEOUT, Linux):
	// gRPC-Go's server default.
	userTimeout = 20 * time.Second
	// drainLinger bounds how long a drained connection waits for its
	// client to close it after the server has closed its side.
	drainLinger = 5 * time.Second
)

var errClientGone = errors.New("h2grpc: client closed the connection")

// connError is an HTTP/2 connection error: the server sends GOAWAY with
// code and closes the connection.
type connError struct {
	code http2.ErrCode
	msg  string
}

func (e connError) Error() string { return fmt.Sprintf("http2 %v: %s", e.code, e.msg) }

// conn is one client connection. The reader (serve's goroutine) parses
// frames and owns the fields above mu; everything under mu is shared with
// the streams' handlers and the writer.
type conn struct {
	srv    *Server
	opts   *Options
	nc     net.Conn
	peer   *peer.Peer
	br     *bufio.Reader
	ctx    context.Context // ends with the connection
	cancel context.CancelFunc

	// The reader's own state.
	dec         *hpack.Decoder
	block       []byte // a header block gathered from HEADERS and CONTINUATION
	blockStream uint32
	blockFlags  http2.Flags
	blockSelf   bool // the block's HEADERS made its stream depend on itself
	inBlock     bool
	marks       streamMarks // the recent streams the client ended or reset
	frame       []byte      // scratch for control frames' payloads
	hfields     []hpack.HeaderField
	fieldBytes  int   // the decoded size of fields, as HTTP/2 counts it
	fieldsOver  bool  // fields passed MaxHeaderBlock decoded
	connRecv    int64 // connection window the client has left
	lastPing    time.Time
	pingStrikes int
	connUnacked int64 // received on the connection and not yet returned
	// unfilled is the room in the buffers that messages being read were
	// given and that their bytes have not filled yet, over the streams.
	unfilled int

	// running counts the handlers still running, for the stream limit.
	running atomic.Int32

	mu      sync.Mutex
	streams map[uint32]*stream
	lastID  uint32 // the highest stream the client has opened
	// The last stream id of the GOAWAY sent, if any (under mu).
	goAwaySent bool
	goAwayLast uint32
	enc        *hpack.Encoder
	encBuf     bytes.Buffer
	connSend   int64 // the client's connection window
	initSend   int64 // the client's initial stream window
	peerMax    int   // the largest frame the client accepts
	// Gathered writes: out holds slices of small (frames copied in) and
	// of message buffers (referenced); mark is where small's uncut part
	// starts. free holds buffers to free once what is gathered is written.
	out        net.Buffers
	small      []byte
	mark       int
	queued     int
	control    int
	free       []mem.Buffer
	spareOut   net.Buffers
	spareSmall []byte
	spareFree  []mem.Buffer
	// writev: nc is a socket, which takes a gathered write in one
	// system call. Otherwise (TLS) the writer copies the pieces into
	// wbuf, as a Write on a TLS connection is a record and a system call.
	writev     bool
	wbuf       []byte
	wake       chan struct{}
	writeErr   error
	closed     bool // the reader has ended
	stopWriter bool
	draining   bool // GOAWAY sent: no new streams
	opening    bool // a stream is accepted and not yet open (or answered)
	// Streams the connection's send window stopped with bytes to send, in
	// the order they stopped; each once (stream.connWait).
	connWait, spareConnWait []*stream
	// outWait holds the streams maxOutQueued stopped, pumped again once
	// the writer takes a batch (under mu).
	outWait, spareOutWait []*stream
	// Streams removed, whose half-read message the reader is to free.
	removed []*stream
	// hasRemoved is set while removed is not empty, so that the reader
	// looks at it without taking mu for every frame.
	hasRemoved atomic.Bool
	sentData   bool // DATA or HEADERS written since the client's last PING
	closeIdle  bool // drained and idle: the writer closes the connection

	handlers sync.WaitGroup
	writer   sync.WaitGroup
}

func newConn(srv *Server, nc net.Conn, auth credentials.AuthInfo) *conn {
	c := &conn{
		srv:      srv,
		opts:     &srv.opts,
		nc:       nc,
		peer:     &peer.Peer{Addr: nc.RemoteAddr(), LocalAddr: nc.LocalAddr(), AuthInfo: auth},
		br:       bufio.NewReaderSize(nc, readBufferBytes),
		connRecv: int64(srv.opts.ConnWindow),
		streams:  map[uint32]*stream{},
		connSend: 65535,
		initSend: 65535,
		peerMax:  maxFrame,
		wake:     make(chan struct{}, 1),
		small:    make([]byte, 0, 16<<10),
	}
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
		c.writev = true
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	// The decoded size of a header list is bounded as well as its encoded
	// size: a small block can name a large dynamic-table entry many times.
	c.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if c.fieldBytes += len(f.Name) + len(f.Value) + 32; c.fieldBytes > c.opts.MaxHeaderBlock {
			c.fieldsOver = true
			return
		}
		c.hfields = append(c.hfields, f)
	})
	c.dec.SetMaxStringLength(c.opts.MaxHeaderBlock)
	c.enc = hpack.NewEncoder(&c.encBuf)
	// The server's preface is queued before the connection can be
	// drained, so that GOAWAY never comes before it (RFC 9113, 3.4).
	c.mu.Lock()
	c.frameHeader(18, http2.FrameSettings, 0, 0)
	c.setting(http2.SettingMaxConcurrentStreams, c.opts.MaxConcurrentStreams)
	c.setting(http2.SettingInitialWindowSize, c.opts.StreamWindow)
	c.setting(http2.SettingMaxHeaderListSize, uint32(c.opts.MaxHeaderBlock))
	if c.opts.ConnWindow > 65535 {
		c.windowUpdate(0, int64(c.opts.ConnWindow)-65535)
	}
	c.kick()
	c.mu.Unlock()
	return c
}

// serve runs the connection until it ends, and returns why.
func (c *conn) serve() error {
	c.nc.SetWriteDeadline(time.Time{}) // the handshake's deadline still bounds the preface
	c.writer.Go(c.writeLoop)

	var preface [len(http2.ClientPreface)]byte
	_, err := io.ReadFull(c.br, preface[:])
	switch {
	case err != nil:
	case string(preface[:]) != http2.ClientPreface:
		err = errors.New("h2grpc: not an HTTP/2 client preface")
	default:
		c.mu.Lock()
		if !c.draining {
			// A drained connection keeps its deadline: the preface's,
			// or the linger the writer sets once it has closed its side.
			c.nc.SetReadDeadline(time.Time{})
		}
		c.mu.Unlock()
		err = c.loop()
	}
	c.teardown(err)
	return err
}

// teardown ends the streams, waits for their handlers, and closes the
// connection once the writer has written what is queued.
func (c *conn) teardown(err error) {
	c.mu.Lock()
	c.closed = true
	gone := status.New(codes.Unavailable, "h2grpc: connection closed")
	for _, s := range c.streams {
		c.closeStream(s, gone)
	}
	var ce connError
	flushFor := time.Duration(0)
	if errors.As(err, &ce) {
		c.goAway(c.lastID, ce.code, ce.msg)
		flushFor = time.Second
	}
	c.mu.Unlock()
	c.cancel()
	c.handlers.Wait()
	c.nc.SetWriteDeadline(time.Now().Add(flushFor))
	c.mu.Lock()
	c.stopWriter = true
	c.kick()
	c.mu.Unlock()
	c.writer.Wait()
	c.mu.Lock()
	r := c.removed
	c.removed = nil
	c.mu.Unlock()
	c.dropRemoved(r)
	if flushFor > 0 {
		c.linger()
	}
	c.nc.Close()
}

// linger closes the server's side of a connection that ends in a
// connection error, and reads what the client still sends (at most
// lingerBytes, for at most lingerFor) before the caller closes it: closing
// a socket with unread bytes makes the kernel reset the connection, and
// the reset can destroy the GOAWAY that tells the client why.
func (c *conn) linger() {
	c.mu.Lock()
	failed := c.writeErr != nil
	c.mu.Unlock()
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if failed || !ok || cw.CloseWrite() != nil {
		return
	}
	c.nc.SetReadDeadline(time.Now().Add(lingerFor))
	io.Copy(io.Discard, io.LimitReader(c.nc, lingerBytes))
}

const (
	lingerFor   = time.Second
	lingerBytes = 1 << 20
)

// drain sends GOAWAY: the client's open streams run to their end, new ones
// are refused, and the connection closes once none is left.
func (c *conn) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining || c.closed {
		return
	}
	c.draining = true
	c.goAway(c.lastID, http2.ErrCodeNo, "server shutting down")
	c.kick()
	c.closeIfDrained()
}

func (c *conn) loop() error {
	var fh [9]byte
	for {
		if _, err := io.ReadFull(c.br, fh[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return errClientGone
			}
			return err
		}
		n := int(fh[0])<<16 | int(fh[1])<<8 | int(fh[2])
		typ, flags := http2.FrameType(fh[3]), http2.Flags(fh[4])
		id := binary.BigEndian.Uint32(fh[5:]) & 0x7fffffff
		if n > maxFrame {
			return connError{http2.ErrCodeFrameSize, fmt.Sprintf("%v frame of %d bytes, over %d", typ, n, maxFrame)}
		}
		if c.inBlock && typ != http2.FrameContinuation {
			return connError{http2.ErrCodeProtocol, fmt.Sprintf("%v frame inside a header block", typ)}
		}
		// Streams closed since the last frame are forgotten on every
		// frame, not only on DATA: a client that opens and resets
		// streams and sends no DATA must not have them kept.
		if c.hasRemoved.Load() {
			c.mu.Lock()
			r := c.removed
			c.removed = nil
			c.hasRemoved.Store(false)
			c.mu.Unlock()
			c.dropRemoved(r)
		}
		var err error
		switch typ {
		case http2.FrameData:
			err = c.onData(id, flags, n)
		case http2.FrameHeaders, http2.FrameContinuation:
			err = c.onHeaders(typ, id, flags, n)
		case http2.FrameRSTStream:
			err = c.onReset(id, n)
		case http2.FrameSettings:
			err = c.onSettings(id, flags, n)
		case http2.FramePing:
			err = c.onPing(id, flags, n)
		case http2.FrameGoAway:
			// The client opens no more streams and closes the connection
			// when its own are done; read on until it does.
			if id != 0 {
				return connError{http2.ErrCodeProtocol, "GOAWAY on a stream"}
			}
			_, err = c.br.Discard(n)
		case http2.FrameWindowUpdate:
			err = c.onWindowUpdate(id, n)
		case http2.FramePushPromise:
			err = connError{http2.ErrCodeProtocol, "PUSH_PROMISE from a client"}
		case http2.FramePriority:
			// Priorities are ignored, but the frame must be well formed.
			switch {
			case id == 0:
				err = connError{http2.ErrCodeProtocol, "PRIORITY on stream 0"}
			case n != 5:
				if _, err = c.br.Discard(n); err == nil {
					err = c.streamError(id, http2.ErrCodeFrameSize, "PRIORITY frame of the wrong size")
				}
			default:
				var p []byte
				if p, err = c.readFrame(n, 5); err == nil && binary.BigEndian.Uint32(p)&0x7fffffff == id {
					// A stream error (RFC 9113, 5.3.1).
					err = c.streamError(id, http2.ErrCodeProtocol, "a stream that depends on itself")
				}
			}
		default: // PRIORITY and unknown frames are ignored
			_, err = c.br.Discard(n)
		}
		if err != nil {
			return err
		}
	}
}

// readFrame reads a control frame's payload of n bytes, which must be
// want bytes (or a multiple of -want, if negative).
func (c *conn) readFrame(n, want int) ([]byte, error) {
	if (want >= 0 && n != want) || (want < 0 && n%-want != 0) {
		return nil, connError{http2.ErrCodeFrameSize, fmt.Sprintf("control frame of %d bytes", n)}
	}
	if cap(c.frame) < n {
		c.frame = make([]byte, n)
	}
	c.frame = c.frame[:n]
	_, err := io.ReadFull(c.br, c.frame)
	return c.frame, err
}

func (c *conn) onSettings(id uint32, flags http2.Flags, n int) error {
	if id != 0 {
		return connError{http2.ErrCodeProtocol, "SETTINGS on a stream"}
	}
	if flags&http2.FlagSettingsAck != 0 {
		_, err := c.readFrame(n, 0)
		return err
	}
	p, err := c.readFrame(n, -6)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ; len(p) > 0; p = p[6:] {
		v := binary.BigEndian.Uint32(p[2:])
		switch http2.SettingID(binary.BigEndian.Uint16(p)) {
		case http2.SettingInitialWindowSize:
			if v > 1<<31-1 {
				return connError{http2.ErrCodeFlowControl, "initial window over 2^31-1"}
			}
			for _, s := range c.streams {
				// A change that takes a window past the maximum is a
				// connection error (RFC 9113, 6.9.2).
				if s.sendWin += int64(v) - c.initSend; s.sendWin > 1<<31-1 {
					return connError{http2.ErrCodeFlowControl, fmt.Sprintf("initial window %d takes stream %d's window over 2^31-1", v, s.id)}
				}
			}
			c.initSend = int64(v)
		case http2.SettingMaxFrameSize:
			if v < 16384 || v > 1<<24-1 {
				return connError{http2.ErrCodeProtocol, fmt.Sprintf("max frame size %d", v)}
			}
			c.peerMax = int(v)
		case http2.SettingHeaderTableSize:
			c.enc.SetMaxDynamicTableSizeLimit(v)
		case http2.SettingEnablePush:
			if v > 1 {
				return connError{http2.ErrCodeProtocol, fmt.Sprintf("SETTINGS_ENABLE_PUSH of %d", v)}
			}
		}
	}
	c.frameHeader(0, http2.FrameSettings, http2.FlagSettingsAck, 0)
	c.pumpAll()
	c.kick() // the acknowledgement goes now, not with the next write
	return c.controlQueued(9)
}

func (c *conn) onPing(id uint32, flags http2.Flags, n int) error {
	if id != 0 {
		return connError{http2.ErrCodeProtocol, "PING on a stream"}
	}
	p, err := c.readFrame(n, 8)
	if err != nil || flags&http2.FlagPingAck != 0 {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frameHeader(8, http2.FramePing, http2.FlagPingAck, 0)
	c.write(p)
	c.kick()
	// Keepalive enforcement, as gRPC-Go's: a PING sooner than
	// KeepaliveMinTime after the last, with nothing sent in between, is a
	// strike; the third ends the connection.
	now := time.Now()
	switch {
	case c.sentData:
		c.sentData, c.pingStrikes = false, 0
	case !c.lastPing.IsZero() && now.Sub(c.lastPing) < c.opts.KeepaliveMinTime:
		if c.pingStrikes++; c.pingStrikes > 2 {
			return connError{http2.ErrCodeEnhanceYourCalm, "too_many_pings"}
		}
	}
	c.lastPing = now
	return c.controlQueued(17)
}

// controlQueued counts n bytes queued in answer to the client, and fails
// the connection if too many wait unread (under mu).
func (c *conn) controlQueued(n int) error {
	if c.control += n; c.control > maxControlBytes {
		return connError{http2.ErrCodeEnhanceYourCalm, "too many control frames queued unread"}
	}
	return nil
}

func (c *conn) onWindowUpdate(id uint32, n int) error {
	p, err := c.readFrame(n, 4)
	if err != nil {
		return err
	}
	inc := int64(binary.BigEndian.Uint32(p) & 0x7fffffff)
	c.mu.Lock()
	defer c.mu.Unlock()
	if id == 0 {
		if inc == 0 {
			return connError{http2.ErrCodeProtocol, "connection WINDOW_UPDATE of 0"}
		}
		if c.connSend += inc; c.connSend > 1<<31-1 {
			return connError{http2.ErrCodeFlowControl, "connection window over 2^31-1"}
		}
		c.pumpConnWait()
		return nil
	}
	if c.idle(id) {
		return connError{http2.ErrCodeProtocol, fmt.Sprintf("WINDOW_UPDATE on idle stream %d", id)}
	}
	if inc == 0 {
		// A stream error (RFC 9113, 6.9).
		return c.streamErrorLocked(id, http2.ErrCodeProtocol, "WINDOW_UPDATE of 0")
	}
	if s := c.streams[id]; s != nil {
		if s.sendWin += inc; s.sendWin > 1<<31-1 {
			c.resetStream(s, http2.ErrCodeFlowControl, status.New(codes.Internal, "h2grpc: stream window over 2^31-1"))
			return nil
		}
		c.pump(s)
	}
	return nil
}

func (c *conn) onReset(id uint32, n int) error {
	p, err := c.readFrame(n, 4)
	if err != nil {
		return err
	}
	if id == 0 {
		return connError{http2.ErrCodeProtocol, "RST_STREAM on stream 0"}
	}
	code := http2.ErrCode(binary.BigEndian.Uint32(p))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle(id) {
		return connError{http2.ErrCodeProtocol, fmt.Sprintf("RST_STREAM on idle stream %d", id)}
	}
	c.marks.add(id, markReset)
	if s := c.streams[id]; s != nil {
		c.closeStream(s, status.New(codes.Canceled, "h2grpc: the client reset the stream: "+code.String()))
	}
	return nil
}

func (c *conn) onData(id uint32, flags http2.Flags, n int) error {
	if id == 0 {
		return connError{http2.ErrCodeProtocol, "DATA on stream 0"}
	}
	if c.connRecv -= int64(n); c.connRecv < 0 {
		return connError{http2.ErrCodeFlowControl, "DATA beyond the connection window"}
	}
	c.connUnacked += int64(n)
	c.mu.Lock()
	// The connection window is returned as data arrives, whether or not a
	// handler reads it: it paces the client, the streams' windows bound
	// what the server holds.
	if c.connUnacked >= int64(c.opts.ConnWindow)/4 {
		c.windowUpdate(0, c.connUnacked)
		c.connRecv += c.connUnacked
		c.connUnacked = 0
		c.kick()
	}
	if c.idle(id) {
		c.mu.Unlock()
		return connError{http2.ErrCodeProtocol, fmt.Sprintf("DATA on idle stream %d", id)}
	}
	s := c.streams[id]
	var err error
	switch {
	case s != nil && !s.recvDone: // open: the usual case
		if s.recvWin -= int64(n); s.recvWin < 0 {
			c.mu.Unlock()
			return connError{http2.ErrCodeFlowControl, fmt.Sprintf("DATA beyond stream %d's window", id)}
		}
		s.unacked += int64(n)
		// What the reader holds of the message being read, before this
		// frame's bytes: nothing once it drops the stream's data.
		if s.partial = int64(s.np + s.at); s.dropping {
			s.partial = 0
		}
		c.maybeReturn(s)
	case s != nil || c.marks.has(id, markEnded):
		// DATA after the client's END_STREAM (RFC 9113, 5.1): a stream
		// error while the stream is open, a connection error once closed.
		if s == nil {
			c.mu.Unlock()
			return connError{http2.ErrCodeStreamClosed, fmt.Sprintf("DATA on stream %d after its END_STREAM", id)}
		}
		err, s = c.streamErrorLocked(id, http2.ErrCodeStreamClosed, "DATA after END_STREAM"), nil
	case c.marks.has(id, markReset):
		// DATA after the client's RST_STREAM: a stream error.
		err = c.streamErrorLocked(id, http2.ErrCodeStreamClosed, "DATA after RST_STREAM")
	default:
		// Closed by the server, which may have reset it: the client's
		// DATA may have been on its way. Dropped.
	}
	if flags&http2.FlagDataEndStream != 0 {
		c.marks.add(id, markEnded)
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}

	pad := 0
	if flags&http2.FlagDataPadded != 0 {
		if n == 0 {
			return connError{http2.ErrCodeProtocol, "padded DATA without its pad length"}
		}
		b, err := c.br.ReadByte()
		if err != nil {
			return err
		}
		n--
		if pad = int(b); pad > n {
			return connError{http2.ErrCodeProtocol, "DATA padding longer than the frame"}
		}
	}
	if s == nil {
		_, err := c.br.Discard(n)
		return err
	}
	if err := c.feed(s, n-pad); err != nil {
		return err
	}
	if _, err := c.br.Discard(pad); err != nil {
		return err
	}
	if flags&http2.FlagDataEndStream != 0 {
		c.endOfClient(s)
	}
	return nil
}

// idle reports whether stream id is idle: never opened by the client,
// which opens odd ids in order (the server opens none). Reader only.
func (c *conn) idle(id uint32) bool {
	return id > c.lastID || id%2 == 0
}

// streamError answers a stream error on stream id, open or not, with
// RST_STREAM (RFC 9113, 5.4.2).
func (c *conn) streamError(id uint32, code http2.ErrCode, reason string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streamErrorLocked(id, code, reason)
}

// streamErrorLocked is streamError under mu.
func (c *conn) streamErrorLocked(id uint32, code http2.ErrCode, reason string) error {
	if s := c.streams[id]; s != nil {
		c.resetStream(s, code, status.New(codes.Internal, "h2grpc: "+reason))
	} else {
		c.rst(id, code)
		c.kick()
	}
	return c.controlQueued(13)
}

// maybeReturn returns a stream's window to the client once a quarter of
// it is used, unless the stream holds a window's worth of bytes its
// handler has not read: messages queued and the one being read. The
// message being read does not hold the window back while the handler
// waits for it, or no message larger than the window would ever arrive
// (gRPC-Go widens the window for a message the handler waits for in the
// same way). So a stream whose handler does not read holds about two
// windows at most, whatever the size of the messages (under mu).
func (c *conn) maybeReturn(s *stream) {
	w := int64(c.opts.StreamWindow)
	if s.unacked < w/4 || s.recvDone || s.closed || s.queuedBytes >= w ||
		(!s.waiting && s.queuedBytes+s.partial >= w) {
		return
	}
	c.windowUpdate(s.id, s.unacked)
	s.recvWin += s.unacked
	s.unacked = 0
	c.kick()
}

// feed reads n bytes of s's messages from the connection, delivering each
// message as its last byte arrives.
func (c *conn) feed(s *stream, n int) error {
	for n > 0 {
		if s.dropping {
			_, err := c.br.Discard(n)
			return err
		}
		if s.np < len(s.prefix) {
			k := min(n, len(s.prefix)-s.np)
			if _, err := io.ReadFull(c.br, s.prefix[s.np:s.np+k]); err != nil {
				return err
			}
			s.np += k
			n -= k
			if s.np < len(s.prefix) {
				continue
			}
			size := binary.BigEndian.Uint32(s.prefix[1:])
			switch {
			case s.prefix[0]&1 != 0:
				c.failRecv(s, status.New(codes.Internal, "grpc: compressed flag set with identity or empty encoding"))
			case s.prefix[0] != 0:
				c.failRecv(s, status.Newf(codes.Internal, "grpc: message prefix flags %#x", s.prefix[0]))
			case uint64(size) > uint64(c.opts.MaxRecvMsgSize):
				c.failRecv(s, status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, c.opts.MaxRecvMsgSize))
			default:
				s.msgLen, s.at = int(size), 0
				s.asking, s.headLeft, s.bodyLeft = c.opts.Split != nil && s.msgLen >= c.opts.SplitMinBytes, 0, 0
				if size == 0 {
					if err := c.deliver(s); err != nil {
						return err
					}
				}
			}
			continue
		}
		if s.cur == nil || s.curAt == len(*s.cur) {
			if s.cur != nil {
				s.parts = append(s.parts, mem.NewBuffer(s.cur, s.curPool))
			}
			if s.asking && s.headLeft == 0 && s.bodyLeft == 0 {
				c.cutMessage(s, n)
			}
			size, pool := min(s.msgLen-s.at, maxPiece, max(minPiece, s.at)), c.opts.Pool
			switch {
			case s.headLeft > 0:
				size, s.headLeft = s.headLeft, 0
			case s.bodyLeft > 0:
				size, pool, s.bodyLeft = s.bodyLeft, s.bodyPool, 0
			default:
				if c.unfilled+size > maxUnfilled {
					size = min(size, n)
				}
			}
			s.cur, s.curPool, s.curAt = pool.Get(size), pool, 0
			c.unfilled += size
		}
		k := min(n, len(*s.cur)-s.curAt)
		if _, err := io.ReadFull(c.br, (*s.cur)[s.curAt:s.curAt+k]); err != nil {
			return err
		}
		c.unfilled -= k
		s.curAt += k
		s.at += k
		n -= k
		if s.at == s.msgLen {
			if err := c.deliver(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// cutMessage asks Options.Split where the next buffers of s's message end, with n
// bytes of the current frame left to read (n > 0).
func (c *conn) cutMessage(s *stream, n int) {
	left := s.msgLen - s.at
	head, _ := c.br.Peek(min(n, left, 16))
	k, m, pool := c.opts.Split(s.m.name, left, head)
	if k < 0 || m < 0 || k+m == 0 || k+m > left || m > maxPiece || k > maxPiece || (m > 0 && pool == nil) ||
		c.unfilled+k+m > maxUnfilled {
		s.asking = false
		return
	}
	s.headLeft, s.bodyLeft, s.bodyPool = k, m, pool
}

// deliver queues the message just read for s's handler. Its error ends
// the connection.
func (c *conn) deliver(s *stream) error {
	if s.cur != nil {
		s.parts = append(s.parts, mem.NewBuffer(s.cur, s.curPool))
	}
	msg := s.parts
	size := msgCharge(s.msgLen)
	s.parts, s.cur, s.curAt, s.np, s.msgLen, s.at = nil, nil, 0, 0, 0, 0
	c.mu.Lock()
	s.partial, s.waiting = 0, false
	if s.closed || s.finished {
		c.mu.Unlock()
		msg.Free()
		return nil
	}
	s.msgs = append(s.msgs, msg)
	s.queuedBytes += size
	if len(s.msgs)-s.msgHead > c.maxQueuedMsgs() {
		// A window's worth of tiny messages, unread: each costs a
		// buffer and a slot far larger than its bytes on the wire.
		// No client of a replay service queues this many.
		c.resetStream(s, http2.ErrCodeEnhanceYourCalm,
			status.New(codes.ResourceExhausted, "h2grpc: too many messages queued unread on the stream"))
		err := c.controlQueued(13)
		c.mu.Unlock()
		s.dropping = true // the rest of its data is read and dropped
		return err
	}
	c.mu.Unlock()
	signal(s.rwake)
	return nil
}

// maxQueuedMsgs bounds the messages a stream's handler has not read: one
// per 64 bytes of the stream window, and at least 1024.
func (c *conn) maxQueuedMsgs() int { return max(1024, int(c.opts.StreamWindow/64)) }

// failRecv ends what s can receive with st: its handler reads st's error
// after the messages already queued, and the rest of its data is dropped.
func (c *conn) failRecv(s *stream, st *status.Status) {
	c.dropPartial(s)
	s.dropping = true
	c.mu.Lock()
	if s.recvErr == nil {
		s.recvErr = st.Err()
	}
	c.mu.Unlock()
	signal(s.rwake)
}

// dropPartial frees the message being read on s (reader only).
func (c *conn) dropPartial(s *stream) {
	s.parts.Free()
	if s.cur != nil {
		c.unfilled -= len(*s.cur) - s.curAt
		s.curPool.Put(s.cur)
	}
	s.parts, s.cur, s.curAt = nil, nil, 0
}

// endOfClient marks s half-closed by the client (END_STREAM).
func (c *conn) endOfClient(s *stream) {
	var err error
	if !s.dropping && (s.np > 0 || s.at > 0) {
		c.dropPartial(s)
		err = status.Error(codes.Internal, "grpc: the client ended the stream inside a message")
	}
	s.dropping = true
	c.mu.Lock()
	s.recvDone = true
	if err != nil && s.recvErr == nil {
		s.recvErr = err
	}
	c.mu.Unlock()
	signal(s.rwake)
}

func (c *conn) onHeaders(typ http2.FrameType, id uint32, flags http2.Flags, n int) error {
	if typ == http2.FrameContinuation && (!c.inBlock || id != c.blockStream) {
		return connError{http2.ErrCodeProtocol, "CONTINUATION without its HEADERS"}
	}
	if id == 0 {
		return connError{http2.ErrCodeProtocol, "HEADERS on stream 0"}
	}
	p, err := c.readFrame(n, -1)
	if err != nil {
		return err
	}
	if typ == http2.FrameHeaders {
		if flags&http2.FlagHeadersPadded != 0 {
			if len(p) < 1 || int(p[0]) > len(p)-1 {
				return connError{http2.ErrCodeProtocol, "HEADERS padding longer than the frame"}
			}
			p = p[1 : len(p)-int(p[0])]
		}
		self := false
		if flags&http2.FlagHeadersPriority != 0 {
			if len(p) < 5 {
				return connError{http2.ErrCodeProtocol, "HEADERS too short for its priority"}
			}
			self = binary.BigEndian.Uint32(p)&0x7fffffff == id
			p = p[5:]
		}
		c.block, c.blockStream, c.blockFlags, c.blockSelf, c.inBlock = c.block[:0], id, flags, self, true
	}
	if len(c.block)+len(p) > c.opts.MaxHeaderBlock {
		return connError{http2.ErrCodeEnhanceYourCalm, fmt.Sprintf("header block over %d bytes", c.opts.MaxHeaderBlock)}
	}
	c.block = append(c.block, p...)
	if flags&http2.FlagHeadersEndHeaders == 0 {
		return nil
	}
	c.inBlock = false
	c.hfields, c.fieldBytes, c.fieldsOver = c.hfields[:0], 0, false
	if _, err := c.dec.Write(c.block); err != nil {
		return connError{http2.ErrCodeCompression, err.Error()}
	}
	if err := c.dec.Close(); err != nil {
		return connError{http2.ErrCodeCompression, err.Error()}
	}
	if c.fieldsOver {
		return connError{http2.ErrCodeEnhanceYourCalm, fmt.Sprintf("header list over %d bytes decoded", c.opts.MaxHeaderBlock)}
	}
	fields := c.hfields
	id, end := c.blockStream, c.blockFlags&http2.FlagHeadersEndStream != 0

	c.mu.Lock()
	if s := c.streams[id]; s != nil {
		c.mu.Unlock()
		if s.recvDone {
			// HEADERS after the client's END_STREAM, on a stream still
			// open: a stream error (RFC 9113, 5.1).
			return c.streamError(id, http2.ErrCodeStreamClosed, "HEADERS after END_STREAM")
		}
		// Trailers from the client: gRPC clients send none, but they
		// end the client's side as END_STREAM on DATA does.
		if !end {
			// Malformed: a stream error (RFC 9113, 8.1 and 8.1.1), as on
			// a closed stream below.
			return c.streamError(id, http2.ErrCodeProtocol, "a second HEADERS without END_STREAM")
		}
		if pseudoIn(fields) {
			// Malformed: a stream error (RFC 9113, 8.1 and 8.1.1).
			return c.streamError(id, http2.ErrCodeProtocol, "a pseudo-header in trailers")
		}
		c.marks.add(id, markEnded)
		c.endOfClient(s)
		return nil
	}
	if id%2 == 1 && id <= c.lastID {
		// A closed stream (RFC 9113, 5.1).
		var err error
		switch {
		case c.marks.known(id) && !c.marks.has(id, markOpened):
			err = connError{http2.ErrCodeProtocol, fmt.Sprintf("HEADERS opening stream %d, below the last opened", id)}
		case c.marks.has(id, markEnded):
			err = connError{http2.ErrCodeStreamClosed, fmt.Sprintf("HEADERS on stream %d after its END_STREAM", id)}
		case c.marks.has(id, markReset):
			err = c.streamErrorLocked(id, http2.ErrCodeStreamClosed, "HEADERS after RST_STREAM")
		case !end:
			err = c.streamErrorLocked(id, http2.ErrCodeProtocol, "a second HEADERS without END_STREAM")
		case pseudoIn(fields):
			err = c.streamErrorLocked(id, http2.ErrCodeProtocol, "a pseudo-header in trailers")
		default:
			// Closed by the server, which may have reset it: the
			// client's trailers may have been on their way. Ignored,
			// the block decoded above to keep HPACK in step.
			c.marks.add(id, markEnded)
		}
		c.mu.Unlock()
		return err
	}
	if id%2 == 0 {
		c.mu.Unlock()
		return connError{http2.ErrCodeProtocol, fmt.Sprintf("HEADERS opening stream %d", id)}
	}
	c.lastID = id
	c.marks.advance(id)
	c.marks.add(id, markOpened)
	if end {
		c.marks.add(id, markEnded)
	}
	if c.blockSelf {
		// A stream error (RFC 9113, 5.3.1); the block was still decoded,
		// to keep the decoder's table in step with the client's.
		err := c.streamErrorLocked(id, http2.ErrCodeProtocol, "a stream that depends on itself")
		c.mu.Unlock()
		return err
	}
	if c.draining || c.closed || c.running.Load() >= int32(c.opts.MaxConcurrentStreams) ||
		len(c.streams) >= int(c.opts.MaxConcurrentStreams) {
		// The client retries a refused stream elsewhere or later. Both
		// counts are bounded: handlers that still run (a stream reset at
		// once is gone from streams, its handler not yet returned), and
		// streams still open (a handler that has returned may leave its
		// response waiting for the client's windows).
		c.rst(id, http2.ErrCodeRefusedStream)
		c.kick()
		err := c.controlQueued(13)
		c.mu.Unlock()
		return err
	}
	// Accepted: a GOAWAY from now on counts the stream, so a drain must
	// not find the connection idle until open has settled it.
	c.opening = true
	c.mu.Unlock()
	if testHookAccepted != nil {
		testHookAccepted(c)
	}
	return c.open(id, fields, end)
}

// pseudoIn reports whether fields hold a pseudo-header, which trailers
// may not (RFC 9113, 8.1).
func pseudoIn(fields []hpack.HeaderField) bool {
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") {
			return true
		}
	}
	return false
}

// testHookAccepted, if set, runs between a stream's acceptance and its
// opening.
var testHookAccepted func(*conn)

// writeLoop writes what is gathered whenever woken, until the connection
// ends.
func (c *conn) writeLoop() {
	for {
		c.mu.Lock()
		// Buffers to free alone make a batch too: closeStream leaves
		// the writer a buffer whose bytes it may be writing now.
		for c.queued == 0 && len(c.free) == 0 && !c.stopWriter && !c.closeIdle {
			c.mu.Unlock()
			<-c.wake
			c.mu.Lock()
		}
		if c.queued == 0 && len(c.free) == 0 {
			if c.stopWriter {
				c.mu.Unlock()
				return
			}
			// Drained and idle: close the server's side, and give the
			// client a moment to close its own before the reader gives up.
			c.closeIdle = false
			c.mu.Unlock()
			if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				c.nc.SetReadDeadline(time.Now().Add(drainLinger))
			} else {
				c.nc.Close()
			}
			continue
		}
		c.cut()
		bufs, free, small := c.out, c.free, c.small
		c.out, c.free, c.small = c.spareOut[:0], c.spareFree[:0], c.spareSmall[:0]
		c.spareOut, c.spareFree, c.spareSmall = nil, nil, nil
		c.mark, c.queued, c.control = 0, 0, 0
		if len(c.outWait) > 0 {
			c.pumpOutWait() // gathered while this batch is written
		}
		failed := c.writeErr != nil
		c.mu.Unlock()

		var err error
		if !failed && len(bufs) > 0 {
			if c.writev {
				all := bufs
				_, err = all.WriteTo(c.nc)
			} else {
				err = c.writeCopied(bufs)
			}
		}
		for _, b := range free {
			b.Free()
		}
		clear(bufs)
		clear(free)

		c.mu.Lock()
		c.spareOut, c.spareFree, c.spareSmall = bufs[:0], free[:0], small[:0]
		if err != nil && c.writeErr == nil {
			c.writeErr = err
			c.nc.Close() // the reader fails and tears the connection down
		}
		c.mu.Unlock()
	}
}

// writeCopied writes bufs through wbuf, up to copiedWrite bytes per
// Write (writer only): gathered pieces written one by one would make a
// 9-byte frame header a TLS record and a system call of its own.
func (c *conn) writeCopied(bufs net.Buffers) error {
	if c.wbuf == nil {
		c.wbuf = make([]byte, 0, copiedWrite)
	}
	w := c.wbuf[:0]
	for _, b := range bufs {
		for len(b) > 0 {
			k := min(len(b), copiedWrite-len(w))
			w, b = append(w, b[:k]...), b[k:]
			if len(w) == copiedWrite {
				if _, err := c.nc.Write(w); err != nil {
					return err
				}
				w = w[:0]
			}
		}
	}
	if len(w) > 0 {
		if _, err := c.nc.Write(w); err != nil {
			return err
		}
	}
	return nil
}

// copiedWrite is the most writeCopied writes at once: four TLS records.
const copiedWrite = 64 << 10

// kick wakes the writer (under mu, after queueing).
func (c *conn) kick() { signal(c.wake) }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// The frame writers below gather under mu.

func (c *conn) frameHeader(n int, t http2.FrameType, f http2.Flags, id uint32) {
	b := [9]byte{byte(n >> 16), byte(n >> 8), byte(n), byte(t), byte(f)}
	binary.BigEndian.PutUint32(b[5:], id)
	c.write(b[:])
}

func (c *conn) setting(id http2.SettingID, v uint32) {
	var b [6]byte
	binary.BigEndian.PutUint16(b[:], uint16(id))
	binary.BigEndian.PutUint32(b[2:], v)
	c.write(b[:])
}

func (c *conn) windowUpdate(id uint32, inc int64) {
	c.frameHeader(4, http2.FrameWindowUpdate, 0, id)
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(inc))
	c.write(b[:])
}

func (c *conn) rst(id uint32, code http2.ErrCode) {
	c.frameHeader(4, http2.FrameRSTStream, 0, id)
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(code))
	c.write(b[:])
}

func (c *conn) goAway(last uint32, code http2.ErrCode, msg string) {
	// The last stream id never goes up from one GOAWAY to the next (RFC
	// 9113, 6.8): streams refused while draining raise lastID.
	if c.goAwaySent {
		last = min(last, c.goAwayLast)
	}
	c.goAwaySent, c.goAwayLast = true, last
	c.frameHeader(8+len(msg), http2.FrameGoAway, 0, 0)
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], last)
	binary.BigEndian.PutUint32(b[4:], uint32(code))
	c.write(b[:])
	c.write([]byte(msg))
	c.kick()
}

// headerBlock writes the block in encBuf as HEADERS and, if it is larger
// than a frame, CONTINUATION frames.
func (c *conn) headerBlock(id uint32, end bool) {
	c.sentData = true
	b := c.encBuf.Bytes()
	t, f := http2.FrameHeaders, http2.Flags(0)
	if end {
		f = http2.FlagHeadersEndStream
	}
	for {
		k := min(len(b), c.peerMax)
		if k == len(b) {
			f |= http2.FlagHeadersEndHeaders
		}
		c.frameHeader(k, t, f, id)
		c.write(b[:k])
		if b = b[k:]; len(b) == 0 {
			return
		}
		t, f = http2.FrameContinuation, 0
	}
}

// write gathers b, copied.
func (c *conn) write(b []byte) {
	if len(c.small)+len(b) > cap(c.small) {
		c.cut()
		c.small, c.mark = make([]byte, 0, max(16<<10, len(b))), 0
	}
	c.small = append(c.small, b...)
	c.queued += len(b)
}

// ref gathers b without copying it, unless it is small.
func (c *conn) ref(b []byte) {
	if len(b) < 1024 {
		c.write(b)
		return
	}
	c.cut()
	c.out = append(c.out, b)
	c.queued += len(b)
}

func (c *conn) cut() {
	if len(c.small) > c.mark {
		c.out = append(c.out, c.small[c.mark:])
		c.mark = len(c.small)
	}
}
