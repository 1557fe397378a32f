package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
)

// With --h2, `echo serve` answers the same gRPC service (Up and Down) on
// an HTTP/2 server of its own instead of gRPC-Go's, to the unchanged
// gRPC-Go client of `echo load`. It measures what a replay server could
// save by taking its insert and sample streams off gRPC-Go's transport
// while staying wire-compatible with gRPC clients: the plain TCP echo
// (raw.go) shows what the bytes cost with no protocol at all, and this one
// what HTTP/2 framing, HPACK and flow control add back.
//
// Each connection is served by one goroutine, with no channels, locks or
// per-message allocation on the data path:
//
//   - Frames are parsed from a bufio.Reader of --read-buffer bytes. An
//     inserted payload is read from it straight into its ring slot, frame
//     by frame; with a read buffer smaller than a frame (16 KiB), most of
//     each frame goes from the socket into the slot with the kernel's copy
//     alone, as in the plain TCP echo.
//   - Writes are gathered (small frames copied, sample payloads referenced
//     in their ring slots) and written with one writev when the reader
//     would block, or at 1 MiB.
//   - Flow control: fixed receive windows as reverie's server sets
//     (1 MiB per stream, 4 MiB per connection), returned in WINDOW_UPDATEs
//     once a quarter is used; sends wait for the client's windows.
//
// With --handoff, each stream's messages are answered on a goroutine of
// the stream's own, and a writer goroutine does the writing, as a server
// must that runs a service's handlers as gRPC-Go's does (a handler may
// block, and must not hold up the other streams of its connection). The
// reader still reads each payload into its slot, then hands the stream's
// goroutine the message's count (Up) or request (Down); that goroutine
// queues the acknowledgement or response under the connection's lock and
// wakes the writer.
//
// It is a measuring stick, not a server anyone should deploy: no TLS, no
// deadlines, no compression, no limit on streams, and a client that stops
// reading blocks its connection's writes (and so its reads). A protocol
// error closes the connection; a bad message ends its stream with a gRPC
// status, and the connection serves on.

const (
	h2StreamWindow = 1 << 20 // as reverie's StreamWindowBytes
	h2ConnWindow   = 4 << 20 // as reverie's ConnWindowBytes
	h2MaxFrame     = 16 << 10
	h2FlushAt      = 1 << 20
	// h2MaxRequest bounds a Down request message (a UInt64Value).
	h2MaxRequest = 16
)

// serveH2 accepts connections on lis until it fails (when lis is closed)
// and serves each on its own goroutine, counted in conns if not nil.
func serveH2(lis net.Listener, rs rings, ackEvery uint64, readBuf int, handoff bool, conns *sync.WaitGroup) error {
	for {
		c, err := lis.Accept()
		if err != nil {
			return err
		}
		if conns != nil {
			conns.Add(1)
		}
		go func() {
			defer c.Close()
			if conns != nil {
				defer conns.Done()
			}
			_ = newH2Conn(c, rs, ackEvery, readBuf, handoff).serve() // a broken connection is the client's to report
		}()
	}
}

type h2Conn struct {
	c        net.Conn
	br       *bufio.Reader
	rs       rings
	ackEvery uint64

	// With --handoff: mu guards the send side (the windows, each stream's
	// send state and the gathered writes), wake wakes the writer, and
	// the wait groups count the streams' goroutines and the writer.
	handoff  bool
	mu       sync.Mutex
	wake     chan struct{}
	writeErr error
	handlers sync.WaitGroup
	writer   sync.WaitGroup

	dec    *hpack.Decoder
	enc    *hpack.Encoder
	encBuf bytes.Buffer
	// A header block being gathered from HEADERS and CONTINUATION frames.
	block       []byte
	blockStream uint32
	blockFlags  http2.Flags
	inBlock     bool
	frame       []byte // scratch for control frames' payloads

	streams map[uint32]*h2Stream
	lastID  uint32

	// Send side (under mu with --handoff): the client's windows and
	// largest frame.
	connWin  int64
	initWin  int64
	maxFrame int
	// Receive side: connection window used and not yet returned.
	connUsed int64

	// Gathered writes: out holds slices of small (frames copied in) and
	// of ring slots (referenced); mark is where small's uncut part starts.
	out    net.Buffers
	small  []byte
	mark   int
	queued int
}

type h2Stream struct {
	id   uint32
	up   bool  // Up (inserts), else Down (samples)
	used int64 // receive window used and not yet returned
	// The reader has seen the client's END_STREAM, or failed the stream.
	clientDone bool
	// With --handoff, the stream's goroutine takes events from ev.
	ev       chan h2Event
	evClosed bool

	// Send side (under mu with --handoff).
	win         int64
	headersSent bool
	halfClosed  bool // trailers go once sendq drains
	closed      atomic.Bool

	// The message being read: its 5-byte gRPC prefix, then msgLeft bytes.
	prefix  [5]byte
	np      int
	msgLeft int
	// Up: the BytesValue's tag and length, gathered byte by byte, then
	// the payload read into dst.
	head    [11]byte
	nh      int
	inBody  bool // the head is read; the payload goes to dst
	dst     []byte
	at      int
	scratch []byte
	taken   uint64
	// Down: the request message.
	req  [h2MaxRequest]byte
	nreq int

	// Response bytes waiting for the client's windows (send side).
	sendq    [][]byte
	sendLeft int
	parts    [][]byte
}

func newH2Conn(c net.Conn, rs rings, ackEvery uint64, readBuf int, handoff bool) *h2Conn {
	h := &h2Conn{
		c: c, br: bufio.NewReaderSize(c, max(readBuf, 16)), rs: rs, ackEvery: ackEvery, handoff: handoff,
		streams: map[uint32]*h2Stream{},
		connWin: 65535, initWin: 65535, maxFrame: 16384,
		small: make([]byte, 0, 64<<10),
	}
	h.dec = hpack.NewDecoder(4096, nil)
	h.dec.SetMaxStringLength(16 << 10)
	h.enc = hpack.NewEncoder(&h.encBuf)
	return h
}

// h2ConnError is a connection error: GOAWAY with code, then close.
type h2ConnError struct {
	code http2.ErrCode
	msg  string
}

func (e h2ConnError) Error() string { return fmt.Sprintf("http2 %v: %s", e.code, e.msg) }

func (h *h2Conn) serve() error {
	// The server's preface goes first: its settings and a larger
	// connection window.
	h.frameHeader(12, http2.FrameSettings, 0, 0)
	h.setting(http2.SettingInitialWindowSize, h2StreamWindow)
	h.setting(http2.SettingMaxFrameSize, h2MaxFrame)
	h.windowUpdate(0, h2ConnWindow-65535)
	if err := h.flush(); err != nil {
		return err
	}
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(h.br, preface[:]); err != nil {
		return err
	}
	if string(preface[:]) != http2.ClientPreface {
		return errors.New("not an HTTP/2 client preface")
	}
	if h.handoff {
		h.wake = make(chan struct{}, 1)
		h.writer.Go(h.writeLoop)
	}
	err := h.loop()
	if h.handoff {
		// The streams' goroutines finish what they were handed (dropped,
		// with streams nil), then the writer stops. A writer stuck on a
		// client that has gone is unblocked by the deadline.
		for _, s := range h.streams {
			h.closeEvents(s)
		}
		h.c.SetWriteDeadline(time.Now())
		h.mu.Lock()
		h.streams = nil
		h.mu.Unlock()
		h.handlers.Wait()
		close(h.wake)
		h.writer.Wait()
		h.c.SetWriteDeadline(time.Time{})
	}
	var ce h2ConnError
	if errors.As(err, &ce) {
		h.frameHeader(8, http2.FrameGoAway, 0, 0)
		var b [8]byte
		binary.BigEndian.PutUint32(b[:4], h.lastID)
		binary.BigEndian.PutUint32(b[4:], uint32(ce.code))
		h.write(b[:])
		h.flush()
	}
	return err
}

// lock and unlock guard the send side with --handoff; unlock wakes the
// writer if anything is gathered.
func (h *h2Conn) lock() {
	if h.handoff {
		h.mu.Lock()
	}
}

func (h *h2Conn) unlock() {
	if h.handoff {
		if h.queued > 0 {
			select {
			case h.wake <- struct{}{}:
			default:
			}
		}
		h.mu.Unlock()
	}
}

// writeLoop is the writer with --handoff: it writes what is gathered
// whenever woken, until the connection ends.
func (h *h2Conn) writeLoop() {
	for range h.wake {
		h.mu.Lock()
		if h.writeErr == nil && h.queued > 0 {
			if h.writeErr = h.flush(); h.writeErr != nil {
				h.c.Close() // the reader then fails too
			}
		}
		h.mu.Unlock()
	}
}

func (h *h2Conn) loop() error {
	var fh [9]byte
	for {
		if !h.handoff && h.queued > 0 && (h.br.Buffered() == 0 || h.queued >= h2FlushAt) {
			if err := h.flush(); err != nil {
				return err
			}
		}
		if _, err := io.ReadFull(h.br, fh[:]); err != nil {
			return err
		}
		n := int(fh[0])<<16 | int(fh[1])<<8 | int(fh[2])
		typ, flags := http2.FrameType(fh[3]), http2.Flags(fh[4])
		id := binary.BigEndian.Uint32(fh[5:]) & 0x7fffffff
		if n > h2MaxFrame {
			return h2ConnError{http2.ErrCodeFrameSize, fmt.Sprintf("%v frame of %d bytes", typ, n)}
		}
		if h.inBlock && typ != http2.FrameContinuation {
			return h2ConnError{http2.ErrCodeProtocol, fmt.Sprintf("%v frame inside a header block", typ)}
		}
		var err error
		switch typ {
		case http2.FrameData:
			err = h.onData(id, flags, n)
		case http2.FrameHeaders, http2.FrameContinuation:
			err = h.onHeaders(typ, id, flags, n)
		case http2.FrameRSTStream:
			if _, err = h.readFrame(n, 4); err == nil {
				if s := h.streams[id]; s != nil {
					h.lock()
					s.closed.Store(true)
					h.unlock()
					h.closeEvents(s)
					delete(h.streams, id)
				}
			}
		case http2.FrameSettings:
			err = h.onSettings(flags, n)
		case http2.FramePing:
			var p []byte
			if p, err = h.readFrame(n, 8); err == nil && flags&http2.FlagPingAck == 0 {
				h.lock()
				h.frameHeader(8, http2.FramePing, http2.FlagPingAck, 0)
				h.write(p)
				h.unlock()
			}
		case http2.FrameGoAway:
			if _, err = h.br.Discard(n); err == nil {
				return io.EOF // the client is leaving
			}
		case http2.FrameWindowUpdate:
			err = h.onWindowUpdate(id, n)
		case http2.FramePushPromise:
			err = h2ConnError{http2.ErrCodeProtocol, "PUSH_PROMISE from a client"}
		default: // PRIORITY and unknown frames are ignored
			_, err = h.br.Discard(n)
		}
		if err != nil {
			return err
		}
	}
}

// readFrame reads a control frame's payload of n bytes, which must be
// want bytes (or a multiple of -want, if negative).
func (h *h2Conn) readFrame(n, want int) ([]byte, error) {
	if (want >= 0 && n != want) || (want < 0 && n%-want != 0) {
		return nil, h2ConnError{http2.ErrCodeFrameSize, fmt.Sprintf("control frame of %d bytes", n)}
	}
	if cap(h.frame) < n {
		h.frame = make([]byte, n)
	}
	h.frame = h.frame[:n]
	_, err := io.ReadFull(h.br, h.frame)
	return h.frame, err
}

func (h *h2Conn) onSettings(flags http2.Flags, n int) error {
	if flags&http2.FlagSettingsAck != 0 {
		_, err := h.readFrame(n, 0)
		return err
	}
	p, err := h.readFrame(n, -6)
	if err != nil {
		return err
	}
	h.lock()
	defer h.unlock()
	for ; len(p) > 0; p = p[6:] {
		v := binary.BigEndian.Uint32(p[2:])
		switch http2.SettingID(binary.BigEndian.Uint16(p)) {
		case http2.SettingInitialWindowSize:
			if v > 1<<31-1 {
				return h2ConnError{http2.ErrCodeFlowControl, "initial window over 2^31-1"}
			}
			for _, s := range h.streams {
				s.win += int64(v) - h.initWin
			}
			h.initWin = int64(v)
		case http2.SettingMaxFrameSize:
			if v < 16384 || v > 1<<24-1 {
				return h2ConnError{http2.ErrCodeProtocol, fmt.Sprintf("max frame size %d", v)}
			}
			h.maxFrame = int(v)
		}
	}
	h.frameHeader(0, http2.FrameSettings, http2.FlagSettingsAck, 0)
	h.pumpAll()
	return nil
}

func (h *h2Conn) onWindowUpdate(id uint32, n int) error {
	p, err := h.readFrame(n, 4)
	if err != nil {
		return err
	}
	inc := int64(binary.BigEndian.Uint32(p) & 0x7fffffff)
	h.lock()
	defer h.unlock()
	if id == 0 {
		h.connWin += inc
		h.pumpAll()
	} else if s := h.streams[id]; s != nil {
		s.win += inc
		h.pump(s)
	}
	return nil
}

func (h *h2Conn) onHeaders(typ http2.FrameType, id uint32, flags http2.Flags, n int) error {
	if typ == http2.FrameContinuation && (!h.inBlock || id != h.blockStream) {
		return h2ConnError{http2.ErrCodeProtocol, "CONTINUATION without its HEADERS"}
	}
	p, err := h.readFrame(n, -1)
	if err != nil {
		return err
	}
	if typ == http2.FrameHeaders {
		if flags&http2.FlagHeadersPadded != 0 {
			if len(p) < 1 || int(p[0]) > len(p)-1 {
				return h2ConnError{http2.ErrCodeProtocol, "bad padding"}
			}
			p = p[1 : len(p)-int(p[0])]
		}
		if flags&http2.FlagHeadersPriority != 0 {
			if len(p) < 5 {
				return h2ConnError{http2.ErrCodeProtocol, "short priority"}
			}
			p = p[5:]
		}
		h.block, h.blockStream, h.blockFlags, h.inBlock = h.block[:0], id, flags, true
	}
	h.block = append(h.block, p...)
	if len(h.block) > 64<<10 {
		return h2ConnError{http2.ErrCodeEnhanceYourCalm, "header block over 64 KiB"}
	}
	if flags&http2.FlagHeadersEndHeaders == 0 {
		return nil
	}
	h.inBlock = false
	fields, err := h.dec.DecodeFull(h.block)
	if err != nil {
		return h2ConnError{http2.ErrCodeCompression, err.Error()}
	}
	id, end := h.blockStream, h.blockFlags&http2.FlagHeadersEndStream != 0
	if s := h.stream(id); s != nil { // trailers from the client
		h.endOfClient(s)
		return nil
	}
	if id%2 == 0 || id <= h.lastID {
		return h2ConnError{http2.ErrCodeProtocol, fmt.Sprintf("HEADERS opening stream %d after %d", id, h.lastID)}
	}
	h.lastID = id
	h.lock()
	s := &h2Stream{id: id, win: h.initWin}
	h.streams[id] = s
	h.unlock()
	var path string
	for _, f := range fields {
		if f.Name == ":path" {
			path = f.Value
		}
	}
	switch path {
	case "/" + serviceName + "/Up":
		s.up = true
	case "/" + serviceName + "/Down":
	default:
		h.fail(s, codes.Unimplemented, "unknown method "+path)
		return nil
	}
	if h.handoff {
		s.ev = make(chan h2Event, 64)
		h.handlers.Go(func() { h.streamLoop(s) })
	}
	if end {
		h.endOfClient(s)
	}
	return nil
}

func (h *h2Conn) onData(id uint32, flags http2.Flags, n int) error {
	if id == 0 || id > h.lastID {
		return h2ConnError{http2.ErrCodeProtocol, fmt.Sprintf("DATA on idle stream %d", id)}
	}
	s := h.stream(id)
	h.received(s, n)
	pad := 0
	if flags&http2.FlagDataPadded != 0 {
		b, err := h.br.ReadByte()
		if err != nil {
			return err
		}
		n--
		if pad = int(b); pad > n {
			return h2ConnError{http2.ErrCodeProtocol, "bad padding"}
		}
	}
	if s == nil || s.clientDone { // closed, reset or failed: drop its data
		_, err := h.br.Discard(n)
		return err
	}
	if err := h.feed(s, n-pad); err != nil {
		return err
	}
	if _, err := h.br.Discard(pad); err != nil {
		return err
	}
	if flags&http2.FlagDataEndStream != 0 && !s.clientDone {
		h.endOfClient(s)
	}
	return nil
}

// received counts n bytes of DATA against the receive windows and returns
// them to the client once a quarter of a window is used.
func (h *h2Conn) received(s *h2Stream, n int) {
	if h.connUsed += int64(n); h.connUsed >= h2ConnWindow/4 {
		h.lock()
		h.windowUpdate(0, h.connUsed)
		h.unlock()
		h.connUsed = 0
	}
	if s == nil || s.clientDone {
		return
	}
	if s.used += int64(n); s.used >= h2StreamWindow/4 {
		h.lock()
		h.windowUpdate(s.id, s.used)
		h.unlock()
		s.used = 0
	}
}

// stream is the open stream id, if any, forgetting it once it has ended.
func (h *h2Conn) stream(id uint32) *h2Stream {
	s := h.streams[id]
	if s != nil && s.closed.Load() {
		h.closeEvents(s)
		delete(h.streams, id)
		return nil
	}
	return s
}

// feed reads n bytes of s's messages from the connection. A bad message
// fails the stream and the rest of the n bytes are dropped.
func (h *h2Conn) feed(s *h2Stream, n int) error {
	for n > 0 {
		if s.np < len(s.prefix) {
			k := min(n, len(s.prefix)-s.np)
			if _, err := io.ReadFull(h.br, s.prefix[s.np:s.np+k]); err != nil {
				return err
			}
			s.np += k
			n -= k
			if s.np < len(s.prefix) {
				continue
			}
			if s.prefix[0] != 0 {
				return h.failAndDrop(s, n, codes.Unimplemented, "compressed messages are not served")
			}
			s.msgLeft = int(binary.BigEndian.Uint32(s.prefix[1:]))
			if !s.up && s.msgLeft > h2MaxRequest {
				return h.failAndDrop(s, n, codes.InvalidArgument, fmt.Sprintf("request of %d bytes", s.msgLeft))
			}
			if s.msgLeft == 0 {
				if msg := h.message(s); msg != "" {
					return h.failAndDrop(s, n, codes.InvalidArgument, msg)
				}
			}
			continue
		}
		var k int
		switch {
		case !s.up:
			k = min(n, s.msgLeft)
			if _, err := io.ReadFull(h.br, s.req[s.nreq:s.nreq+k]); err != nil {
				return err
			}
			s.nreq += k
		case !s.inBody:
			// The BytesValue's tag and length, a byte at a time.
			b, err := h.br.ReadByte()
			if err != nil {
				return err
			}
			k = 1
			s.head[s.nh] = b
			s.nh++
			if s.nh >= 2 && b < 0x80 {
				if msg := h.startPayload(s, s.msgLeft-1); msg != "" {
					return h.failAndDrop(s, n-1, codes.InvalidArgument, msg)
				}
			} else if s.nh == len(s.head) {
				return h.failAndDrop(s, n-1, codes.InvalidArgument, "want a BytesValue with its payload in field 1")
			}
		default:
			k = min(n, len(s.dst)-s.at)
			if _, err := io.ReadFull(h.br, s.dst[s.at:s.at+k]); err != nil {
				return err
			}
			s.at += k
		}
		n -= k
		if s.msgLeft -= k; s.msgLeft == 0 {
			if msg := h.message(s); msg != "" {
				return h.failAndDrop(s, n, codes.InvalidArgument, msg)
			}
		}
	}
	return nil
}

// startPayload checks the BytesValue head gathered in s.head, with rest
// bytes of the message after it, and picks where the payload goes: the
// next slot of the ring of its size, or scratch memory.
func (h *h2Conn) startPayload(s *h2Stream, rest int) string {
	if s.head[0] != byte(protowire.EncodeTag(1, protowire.BytesType)) {
		return "want a BytesValue with its payload in field 1"
	}
	size, k := protowire.ConsumeVarint(s.head[1:s.nh])
	if k != s.nh-1 || size != uint64(rest) {
		return fmt.Sprintf("payload length %d in a message with %d bytes left", size, rest)
	}
	if r := h.rs[rest]; r != nil {
		s.dst = r.take()
	} else {
		if cap(s.scratch) < rest {
			s.scratch = make([]byte, rest)
		}
		s.dst = s.scratch[:rest]
	}
	s.at, s.inBody = 0, true
	return ""
}

// message handles the message just read on s, and readies s for the
// next; it returns what is wrong with a bad one.
func (h *h2Conn) message(s *h2Stream) string {
	defer func() { s.np, s.nh, s.inBody, s.dst, s.nreq = 0, 0, false, nil, 0 }()
	if s.up {
		if s.nh > 0 && !s.inBody {
			return "message ends inside its payload's length"
		}
		s.taken++
		if s.taken%h.ackEvery == 0 {
			h.post(s, h2Event{kind: evAck, v: s.taken})
		}
		return ""
	}
	var v uint64
	if p := s.req[:s.nreq]; len(p) > 0 {
		num, typ, k := protowire.ConsumeTag(p)
		if k < 0 || num != 1 || typ != protowire.VarintType {
			return "want a UInt64Value"
		}
		var m int
		if v, m = protowire.ConsumeVarint(p[k:]); m != len(p)-k {
			return "want a UInt64Value"
		}
	}
	size, n := int(v>>16), int(v&0xffff)
	if msg := badRequest(size, n); msg != "" {
		return msg
	}
	h.post(s, h2Event{kind: evRequest, v: v})
	return ""
}

// Events of a stream: what the reader hands its goroutine with --handoff,
// or does at once without.
type h2Event struct {
	kind uint8
	v    uint64 // evAck: payloads taken; evRequest: the request
}

const (
	evAck     = iota // Up: acknowledge v payloads
	evRequest        // Down: answer request v
	evEnd            // the client has half-closed
)

// post hands e to s's goroutine with --handoff, or runs it.
func (h *h2Conn) post(s *h2Stream, e h2Event) {
	if h.handoff {
		s.ev <- e
		return
	}
	h.run(s, e)
}

// closeEvents ends s's goroutine, once it has run what it was posted.
func (h *h2Conn) closeEvents(s *h2Stream) {
	if s.ev != nil && !s.evClosed {
		close(s.ev)
		s.evClosed = true
	}
}

// streamLoop is s's goroutine with --handoff.
func (h *h2Conn) streamLoop(s *h2Stream) {
	for e := range s.ev {
		h.mu.Lock()
		if !s.closed.Load() && h.streams != nil {
			h.run(s, e)
		}
		h.unlock()
	}
}

// run does e on the send side of s (under mu with --handoff).
func (h *h2Conn) run(s *h2Stream, e h2Event) {
	switch e.kind {
	case evAck:
		h.sendAck(s, e.v)
	case evRequest:
		h.respond(s, int(e.v>>16), int(e.v&0xffff))
	case evEnd:
		s.halfClosed = true
		h.pump(s)
	}
}

// respond queues a response of n payloads of size bytes.
func (h *h2Conn) respond(s *h2Stream, size, n int) {
	s.parts = h.rs.responseParts(s.parts[:0], size, n)
	total := size * n
	head := protowire.AppendTag(make([]byte, 5, 16), 1, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(total))
	binary.BigEndian.PutUint32(head[1:5], uint32(len(head)-5+total))
	h.send(s, head, total)
}

func (h *h2Conn) sendAck(s *h2Stream, taken uint64) {
	m := protowire.AppendTag(make([]byte, 5, 16), 1, protowire.VarintType)
	m = protowire.AppendVarint(m, taken)
	binary.BigEndian.PutUint32(m[1:5], uint32(len(m)-5))
	h.send(s, m, 0)
}

// send queues a message on s, head and then s.parts (n bytes), and sends
// what the windows allow.
func (h *h2Conn) send(s *h2Stream, head []byte, n int) {
	if !s.headersSent {
		h.encBuf.Reset()
		h.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		h.enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
		h.frameHeader(h.encBuf.Len(), http2.FrameHeaders, http2.FlagHeadersEndHeaders, s.id)
		h.write(h.encBuf.Bytes())
		s.headersSent = true
	}
	s.sendq = append(s.sendq, head)
	s.sendLeft += len(head)
	if n > 0 {
		s.sendq = append(s.sendq, s.parts...)
		s.sendLeft += n
	}
	h.pump(s)
}

// pump sends s's queued bytes in DATA frames as far as the windows allow,
// and its trailers once the queue is empty and the client has half-closed.
func (h *h2Conn) pump(s *h2Stream) {
	for s.sendLeft > 0 {
		k := int(min(int64(s.sendLeft), int64(h.maxFrame), h.connWin, s.win))
		if k <= 0 {
			return
		}
		h.frameHeader(k, http2.FrameData, 0, s.id)
		h.connWin -= int64(k)
		s.win -= int64(k)
		s.sendLeft -= k
		for k > 0 {
			b := s.sendq[0]
			if len(b) > k {
				h.ref(b[:k])
				s.sendq[0] = b[k:]
				break
			}
			h.ref(b)
			k -= len(b)
			s.sendq[0] = nil
			s.sendq = s.sendq[1:]
		}
	}
	s.sendq = s.sendq[:0]
	if s.halfClosed {
		h.trailers(s, codes.OK, "")
	}
}

func (h *h2Conn) pumpAll() {
	for _, s := range h.streams {
		if s.sendLeft > 0 && !s.closed.Load() {
			h.pump(s)
		}
	}
}

// endOfClient ends s's client side: Up acknowledges the rest; the
// trailers follow what is queued.
func (h *h2Conn) endOfClient(s *h2Stream) {
	if s.np > 0 {
		h.fail(s, codes.InvalidArgument, "stream ended inside a message")
		return
	}
	s.clientDone = true
	if s.up && s.taken%h.ackEvery != 0 {
		h.post(s, h2Event{kind: evAck, v: s.taken})
	}
	h.post(s, h2Event{kind: evEnd})
	h.closeEvents(s)
}

// trailers ends s with status code and forgets it.
func (h *h2Conn) trailers(s *h2Stream, code codes.Code, msg string) {
	h.encBuf.Reset()
	if !s.headersSent {
		h.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		h.enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	}
	h.enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(int(code))})
	if msg != "" {
		h.enc.WriteField(hpack.HeaderField{Name: "grpc-message", Value: msg}) // ASCII, nothing to escape
	}
	h.frameHeader(h.encBuf.Len(), http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream, s.id)
	h.write(h.encBuf.Bytes())
	s.halfClosed = true
	s.closed.Store(true)
}

// fail ends s with an error status, dropping what it had queued, and
// tells the client to stop sending on it.
func (h *h2Conn) fail(s *h2Stream, code codes.Code, msg string) {
	s.clientDone = true
	h.closeEvents(s)
	h.lock()
	defer h.unlock()
	s.sendq, s.sendLeft = nil, 0
	h.trailers(s, code, msg)
	h.frameHeader(4, http2.FrameRSTStream, 0, s.id)
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(http2.ErrCodeNo))
	h.write(b[:])
}

// failAndDrop fails s and drops the rest of its frame, n bytes.
func (h *h2Conn) failAndDrop(s *h2Stream, n int, code codes.Code, msg string) error {
	h.fail(s, code, "echo: "+msg)
	_, err := h.br.Discard(n)
	return err
}

func (h *h2Conn) frameHeader(n int, t http2.FrameType, f http2.Flags, id uint32) {
	b := [9]byte{byte(n >> 16), byte(n >> 8), byte(n), byte(t), byte(f)}
	binary.BigEndian.PutUint32(b[5:], id)
	h.write(b[:])
}

func (h *h2Conn) setting(id http2.SettingID, v uint32) {
	var b [6]byte
	binary.BigEndian.PutUint16(b[:], uint16(id))
	binary.BigEndian.PutUint32(b[2:], v)
	h.write(b[:])
}

func (h *h2Conn) windowUpdate(id uint32, inc int64) {
	h.frameHeader(4, http2.FrameWindowUpdate, 0, id)
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(inc))
	h.write(b[:])
}

// write gathers b, copied.
func (h *h2Conn) write(b []byte) {
	if len(h.small)+len(b) > cap(h.small) {
		h.cut()
		h.small, h.mark = make([]byte, 0, max(64<<10, len(b))), 0
	}
	h.small = append(h.small, b...)
	h.queued += len(b)
}

// ref gathers b without copying it, unless it is small.
func (h *h2Conn) ref(b []byte) {
	if len(b) < 1024 {
		h.write(b)
		return
	}
	h.cut()
	h.out = append(h.out, b)
	h.queued += len(b)
}

func (h *h2Conn) cut() {
	if len(h.small) > h.mark {
		h.out = append(h.out, h.small[h.mark:])
		h.mark = len(h.small)
	}
}

// flush writes everything gathered, with one writev where it can.
func (h *h2Conn) flush() error {
	h.cut()
	bufs := h.out
	_, err := bufs.WriteTo(h.c)
	clear(h.out)
	h.out, h.small, h.mark, h.queued = h.out[:0], h.small[:0], 0, 0
	return err
}
