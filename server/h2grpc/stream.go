package h2grpc

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// stream is one call. The reader owns the message being read; the rest is
// under the connection's mu.
type stream struct {
	c      *conn
	id     uint32
	m      *method
	ctx    context.Context
	cancel context.CancelFunc
	// single: the client sends one message (unary, server-streaming) and
	// the handler has not received it yet (handler only).
	single bool
	// deadline resets the stream when the call's grpc-timeout passes, as
	// gRPC-Go does: the handler's context ends then, but its status may
	// wait behind answers the client grants no window for (under mu).
	deadline *time.Timer

	// The message being read (reader only): its 5-byte prefix, then
	// msgLen bytes, at of them read into parts and cur.
	prefix  [5]byte
	np      int
	msgLen  int
	at      int
	parts   mem.BufferSlice
	cur     *[]byte
	curPool mem.BufferPool // cur's
	curAt   int
	// Options.Split's cuts of the message being read: asking is set while
	// it cuts; headLeft and bodyLeft are the sizes of the next buffers.
	asking             bool
	headLeft, bodyLeft int
	bodyPool           mem.BufferPool
	dropping           bool // the rest of the client's data is dropped

	// Receive side (under mu).
	msgs        []mem.BufferSlice // read; RecvMsg has taken those before msgHead
	msgHead     int
	queuedBytes int64 // their size, with prefixes and msgOverhead each
	recvWin     int64 // window the client has left
	unacked     int64 // received and not yet returned
	partial     int64 // bytes of the message being read, as of the last DATA frame
	waiting     bool  // the handler waits in RecvMsg with nothing queued
	recvDone    bool  // END_STREAM from the client
	recvErr     error // RecvMsg's error after msgs
	rwake       chan struct{}

	// Send side (under mu).
	headersSent bool
	header      metadata.MD
	trailer     metadata.MD
	sendWin     int64
	sendq       []sendPart
	sendHead    int
	sendLeft    int
	headRefd    bool           // the head of sendq is partly gathered, by reference
	connWait    bool           // in the connection's connWait
	outWait     bool           // in the connection's outWait
	finished    bool           // the handler has returned
	st          *status.Status // its status, sent once sendq drains
	closed      bool           // removed from the connection
	swake       chan struct{}
}

// sendPart is bytes queued to send and the buffer to free once they are
// written, if any.
type sendPart struct {
	b     []byte
	owner mem.Buffer
}

// request is what a stream's headers ask for.
type request struct {
	method, path, contentType, encoding string
	timeout                             time.Duration
	hasTimeout                          bool
	md                                  metadata.MD
}

// open starts stream id for the decoded header fields (reader only). The
// error, a connection error, is for answers queued to a client that does
// not read them.
func (c *conn) open(id uint32, fields []hpack.HeaderField, end bool) error {
	if reason := malformed(fields); reason != "" {
		// A malformed request is a stream error (RFC 9113, 8.1.1).
		c.mu.Lock()
		c.rst(id, http2.ErrCodeProtocol)
		c.kick()
		err := c.controlQueued(13)
		c.opened()
		c.mu.Unlock()
		return err
	}
	req, st, httpStatus := parseRequest(fields)
	var m *method
	if st == nil {
		if m = c.srv.lookup(req.path); m == nil {
			svc, name := splitPath(req.path)
			if c.srv.hasService(svc) {
				st = status.Newf(codes.Unimplemented, "unknown method %s for service %s", name, svc)
			} else {
				st = status.Newf(codes.Unimplemented, "unknown service %s", svc)
			}
		}
	}
	if st != nil {
		c.mu.Lock()
		// Count what the answer queued: its message names the path the
		// client sent, which HPACK lets the client repeat in a byte.
		before := c.queued
		c.earlyAbort(id, httpStatus, st, !end)
		err := c.controlQueued(c.queued - before)
		c.opened()
		c.mu.Unlock()
		return err
	}
	s := &stream{
		c: c, id: id, m: m,
		single:  m.stream == nil || !m.stream.ClientStreams,
		recvWin: int64(c.opts.StreamWindow),
		rwake:   make(chan struct{}, 1),
		swake:   make(chan struct{}, 1),
	}
	ctx := c.ctx
	if req.hasTimeout {
		ctx, s.cancel = context.WithTimeout(ctx, req.timeout)
	} else {
		ctx, s.cancel = context.WithCancel(ctx)
	}
	ctx = peer.NewContext(ctx, c.peer)
	ctx = metadata.NewIncomingContext(ctx, req.md)
	s.ctx = grpc.NewContextWithServerTransportStream(ctx, transportStream{s})
	c.mu.Lock()
	s.sendWin = c.initSend
	s.recvDone = end
	if end {
		s.dropping = true
	}
	c.streams[id] = s
	c.opened()
	if req.hasTimeout {
		s.deadline = time.AfterFunc(req.timeout, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !s.closed {
				c.resetStream(s, http2.ErrCodeCancel, status.New(codes.DeadlineExceeded, context.DeadlineExceeded.Error()))
			}
		})
	}
	c.mu.Unlock()
	c.running.Add(1)
	c.handlers.Add(1)
	go c.run(s)
	return nil
}

func (s *Server) hasService(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.services[name]
	return ok
}

func splitPath(path string) (service, method string) {
	p := strings.TrimPrefix(path, "/")
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[:i], p[i+1:]
	}
	return p, ""
}

// requestPseudo numbers the pseudo-headers a request may have.
var requestPseudo = map[string]int{":method": 0, ":scheme": 1, ":path": 2, ":authority": 3}

// malformed returns what makes a request's header list malformed in
// HTTP/2's terms (RFC 9113, 8.2 and 8.3), or "".
func malformed(fields []hpack.HeaderField) string {
	regular := false
	var seen [4]bool
	for _, f := range fields {
		for i := 0; i < len(f.Name); i++ {
			if c := f.Name[i]; 'A' <= c && c <= 'Z' {
				return "upper-case header name " + f.Name
			}
		}
		if strings.HasPrefix(f.Name, ":") {
			if regular {
				return "pseudo-header " + f.Name + " after a regular header"
			}
			k, ok := requestPseudo[f.Name]
			if !ok {
				return "pseudo-header " + f.Name + " in a request"
			}
			if seen[k] {
				return "pseudo-header " + f.Name + " twice"
			}
			if f.Name == ":path" && f.Value == "" {
				return "empty :path"
			}
			seen[k] = true
			continue
		}
		regular = true
		switch f.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return "connection-specific header " + f.Name
		case "te":
			if f.Value != "trailers" {
				return "te other than trailers"
			}
		}
	}
	// Every request but CONNECT, which gRPC does not use, names all
	// three (8.3.1).
	for k, name := range [...]string{":method", ":scheme", ":path"} {
		if !seen[k] {
			return "no " + name + " pseudo-header"
		}
	}
	return ""
}

// parseRequest reads a request's header fields. A request gRPC cannot
// serve gets a status, and the HTTP status to answer with.
func parseRequest(fields []hpack.HeaderField) (request, *status.Status, int) {
	r := request{md: metadata.MD{}}
	for _, f := range fields {
		switch f.Name {
		case ":method":
			r.method = f.Value
		case ":path":
			r.path = f.Value
		case ":scheme":
		case ":authority":
			r.md[f.Name] = append(r.md[f.Name], f.Value)
		case "content-type":
			r.contentType = f.Value
			r.md[f.Name] = append(r.md[f.Name], f.Value)
		case "grpc-encoding":
			r.encoding = f.Value
		case "grpc-timeout":
			d, err := parseTimeout(f.Value)
			if err != nil {
				return r, status.Newf(codes.Internal, "malformed grpc-timeout: %v", err), 400
			}
			r.timeout, r.hasTimeout = d, true
		case "te", "grpc-message-type", "grpc-message", "grpc-status", "grpc-status-details-bin":
		default: // metadata; malformed has refused other pseudo-headers
			v := f.Value
			if strings.HasSuffix(f.Name, "-bin") {
				b, err := decodeBin(v)
				if err != nil {
					return r, status.Newf(codes.Internal, "malformed binary metadata %s: %v", f.Name, err), 400
				}
				v = string(b)
			}
			r.md[f.Name] = append(r.md[f.Name], v)
		}
	}
	switch {
	case r.method != "POST":
		return r, status.Newf(codes.Internal, "invalid :method %q, want POST", r.method), 405
	case !strings.HasPrefix(r.path, "/"):
		return r, status.Newf(codes.Unimplemented, "malformed method name %q", r.path), 200
	case r.contentType != "application/grpc" && !strings.HasPrefix(r.contentType, "application/grpc+") && !strings.HasPrefix(r.contentType, "application/grpc;"):
		return r, status.Newf(codes.Internal, "invalid gRPC request content-type %q", r.contentType), 415
	case r.encoding != "" && r.encoding != "identity":
		return r, status.Newf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", r.encoding), 200
	}
	return r, nil, 200
}

// parseTimeout parses a grpc-timeout value: up to 8 digits and a unit.
func parseTimeout(v string) (time.Duration, error) {
	if len(v) < 2 || len(v) > 9 {
		return 0, fmt.Errorf("%q", v)
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q", v)
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, fmt.Errorf("%q: unknown unit", v)
	}
	if n > int64(1<<63-1)/int64(unit) {
		return 1<<63 - 1, nil
	}
	return time.Duration(n) * unit, nil
}

func decodeBin(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// run runs s's handler and sends its status.
func (c *conn) run(s *stream) {
	defer c.handlers.Done()
	defer c.running.Add(-1)
	var err error
	if d := s.m.stream; d != nil {
		info := &grpc.StreamServerInfo{FullMethod: s.m.name, IsClientStream: d.ClientStreams, IsServerStream: d.ServerStreams}
		err = streamHandler(c.opts.Stream, 0, info, d.Handler)(s.m.impl, s)
	} else {
		var resp any
		resp, err = s.m.unary.Handler(s.m.impl, s.ctx, s.recvUnary, c.srv.unaryChain)
		if err == nil {
			err = s.SendMsg(resp)
		}
	}
	c.finish(s, err)
}

// finish queues s's status, sent once its messages are.
func (c *conn) finish(s *stream, err error) {
	st := statusOf(err)
	c.mu.Lock()
	s.finished = true
	if !s.closed {
		s.st = st
		c.freeMsgs(s)
		c.pump(s)
	}
	c.mu.Unlock()
	s.cancel()
}

func statusOf(err error) *status.Status {
	if err == nil {
		return status.New(codes.OK, "")
	}
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

// ctxErr is the error of a call whose context has ended.
func ctxErr(ctx context.Context) error {
	return status.FromContextError(ctx.Err()).Err()
}

func (s *stream) recvUnary(m any) error {
	err := s.RecvMsg(m)
	if errors.Is(err, io.EOF) {
		return status.Error(codes.Internal, "grpc: the client sent no request message")
	}
	return err
}

// Context returns the call's context: its deadline, metadata and peer.
func (s *stream) Context() context.Context { return s.ctx }

// RecvMsg waits for the client's next message and decodes it into m. It
// returns io.EOF once the client has half-closed.
func (s *stream) RecvMsg(m any) error {
	c := s.c
	c.mu.Lock()
	if err := s.awaitLocked(); err != nil {
		return err
	}
	// Taken from the head: a queue of many small messages must not cost
	// a copy of the rest for each one.
	data := s.msgs[s.msgHead]
	s.msgs[s.msgHead] = nil
	s.msgHead++
	if s.msgHead == len(s.msgs) {
		s.msgs, s.msgHead = s.msgs[:0], 0
	} else if s.msgHead >= 64 && 2*s.msgHead >= len(s.msgs) {
		n := copy(s.msgs, s.msgs[s.msgHead:])
		clear(s.msgs[n:])
		s.msgs, s.msgHead = s.msgs[:n], 0
	}
	s.queuedBytes -= msgCharge(data.Len())
	c.maybeReturn(s)
	c.mu.Unlock()
	err := c.opts.Codec.Unmarshal(data, m)
	data.Free()
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	if s.single {
		s.single = false
		return s.waitEnd()
	}
	return nil
}

// awaitLocked waits, with c.mu held, until a message is queued on s and
// returns nil with c.mu still held; or it releases c.mu and returns io.EOF
// once the client has half-closed, or the stream's error.
func (s *stream) awaitLocked() error {
	c := s.c
	for s.msgHead == len(s.msgs) {
		err, done := s.recvErr, s.recvDone
		if err == nil && !done && s.closed {
			err = ctxErr(s.ctx)
		}
		if err != nil || done {
			c.mu.Unlock()
			if err != nil {
				return err
			}
			return io.EOF
		}
		// The handler wants the message being read, however large:
		// return the window that held it back.
		s.waiting = true
		c.maybeReturn(s)
		c.mu.Unlock()
		select {
		case <-s.rwake:
		case <-s.ctx.Done():
			c.mu.Lock()
			s.waiting = false
			c.mu.Unlock()
			return ctxErr(s.ctx)
		}
		c.mu.Lock()
	}
	s.waiting = false
	return nil
}

// waitEnd waits, after the request of a method whose client sends one
// (unary or server-streaming), for the client's half-close, and fails with
// gRPC-Go's status if another message comes instead: the handler runs
// only on a well-formed request, and a client sees the same status on
// either transport.
func (s *stream) waitEnd() error {
	s.c.mu.Lock()
	switch err := s.awaitLocked(); err {
	case nil:
		s.c.mu.Unlock()
		return status.Error(codes.Internal, "cardinality violation: received multiple request messages for non-client-streaming RPC")
	case io.EOF:
		return nil
	default:
		return err
	}
}

// SendMsg queues m for the client. It blocks while more than
// maxQueuedSend bytes of the stream's messages wait for the client's
// flow-control windows.
func (s *stream) SendMsg(m any) error {
	c := s.c
	data, err := c.opts.Codec.Marshal(m)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	n := data.Len()
	if n > c.opts.MaxSendMsgSize {
		data.Free()
		return status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", n, c.opts.MaxSendMsgSize)
	}
	prefix := make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], uint32(n))
	c.mu.Lock()
	if s.closed || s.finished {
		c.mu.Unlock()
		data.Free()
		return ctxErr(s.ctx)
	}
	if !s.headersSent {
		c.sendHeaders(s)
	}
	s.sendq = append(s.sendq, sendPart{b: prefix})
	for _, b := range data {
		s.sendq = append(s.sendq, sendPart{b: b.ReadOnlyData(), owner: b})
	}
	s.sendLeft += 5 + n
	c.pump(s)
	for s.sendLeft > maxQueuedSend && !s.closed {
		c.mu.Unlock()
		select {
		case <-s.swake:
		case <-s.ctx.Done():
			return ctxErr(s.ctx)
		}
		c.mu.Lock()
	}
	closed := s.closed
	c.mu.Unlock()
	if closed {
		return ctxErr(s.ctx)
	}
	return nil
}

// SetHeader adds md to the response headers, if they are not sent yet.
func (s *stream) SetHeader(md metadata.MD) error {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.headersSent || s.closed {
		return status.Error(codes.Internal, "h2grpc: SetHeader after the headers were sent")
	}
	s.header = metadata.Join(s.header, md)
	return nil
}

// SendHeader sends the response headers with md added.
func (s *stream) SendHeader(md metadata.MD) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.headersSent || s.closed {
		return status.Error(codes.Internal, "h2grpc: SendHeader after the headers were sent")
	}
	s.header = metadata.Join(s.header, md)
	c.sendHeaders(s)
	c.kick()
	return nil
}

// SetTrailer adds md to the trailers sent with the status.
func (s *stream) SetTrailer(md metadata.MD) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.trailer = metadata.Join(s.trailer, md)
}

// transportStream serves grpc.SetHeader, grpc.SendHeader and
// grpc.SetTrailer on a call's context.
type transportStream struct{ s *stream }

func (t transportStream) Method() string                  { return t.s.m.name }
func (t transportStream) SetHeader(md metadata.MD) error  { return t.s.SetHeader(md) }
func (t transportStream) SendHeader(md metadata.MD) error { return t.s.SendHeader(md) }
func (t transportStream) SetTrailer(md metadata.MD) error { t.s.SetTrailer(md); return nil }

// sendHeaders gathers s's response headers (under mu).
func (c *conn) sendHeaders(s *stream) {
	c.encBuf.Reset()
	c.responseHead(s)
	c.headerBlock(s.id, false)
}

// responseHead encodes s's response headers into encBuf (under mu).
func (c *conn) responseHead(s *stream) {
	c.field(":status", "200")
	c.field("content-type", "application/grpc")
	c.fields(s.header)
	s.headersSent = true
}

func (c *conn) field(name, value string) {
	c.enc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

func (c *conn) fields(md metadata.MD) {
	for k, vs := range md {
		if isReserved(k) {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			c.field(k, v)
		}
	}
}

func isReserved(k string) bool {
	if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") {
		return true
	}
	switch k {
	case "content-type", "te", "connection":
		return true
	}
	return false
}

// pump sends s's queued bytes in DATA frames as far as the windows allow,
// then its trailers once the queue is empty and the handler has returned
// (under mu).
func (c *conn) pump(s *stream) {
	if s.closed {
		return
	}
	for s.sendLeft > 0 {
		room := int64(maxOutQueued - c.queued)
		k := int(min(int64(s.sendLeft), int64(c.peerMax), c.connSend, s.sendWin, room))
		if k <= 0 {
			if room <= 0 && !s.outWait {
				s.outWait = true
				c.outWait = append(c.outWait, s)
			}
			break
		}
		c.frameHeader(k, http2.FrameData, 0, s.id)
		c.sentData = true
		c.connSend -= int64(k)
		s.sendWin -= int64(k)
		s.sendLeft -= k
		for k > 0 {
			p := &s.sendq[s.sendHead]
			if len(p.b) > k {
				c.ref(p.b[:k])
				p.b = p.b[k:]
				s.headRefd = true
				break
			}
			c.ref(p.b)
			k -= len(p.b)
			c.popPart(s)
		}
	}
	if s.sendLeft > 0 && c.connSend <= 0 && !s.connWait {
		// The connection's window stopped it: the next connection-level
		// WINDOW_UPDATE pumps it (pumpConnWait).
		s.connWait = true
		c.connWait = append(c.connWait, s)
	}
	if s.sendLeft == 0 {
		for s.sendHead < len(s.sendq) { // empty buffers left at the end
			c.popPart(s)
		}
		clear(s.sendq)
		s.sendq, s.sendHead = s.sendq[:0], 0
	} else if s.sendHead >= 64 && 2*s.sendHead >= len(s.sendq) {
		// A stream whose client reads a little slower than the handler
		// sends never empties its queue: drop the parts already sent, or
		// the queue's array grows for as long as the call lasts.
		n := copy(s.sendq, s.sendq[s.sendHead:])
		clear(s.sendq[n:])
		s.sendq, s.sendHead = s.sendq[:n], 0
	}
	if s.sendLeft <= maxQueuedSend {
		signal(s.swake)
	}
	if s.finished && s.sendLeft == 0 {
		c.sendTrailers(s)
		c.remove(s)
	}
	c.kick()
}

// popPart drops the part at the head of s's queue, its bytes gathered; its
// buffer is freed once they are written.
func (c *conn) popPart(s *stream) {
	p := &s.sendq[s.sendHead]
	if p.owner != nil {
		c.free = append(c.free, p.owner)
	}
	*p = sendPart{}
	s.sendHead++
	s.headRefd = false
}

// pumpConnWait pumps the streams the connection's window stopped, in the
// order they stopped, once the window has grown (under mu). Those it
// stops again wait for the next WINDOW_UPDATE.
func (c *conn) pumpConnWait() {
	c.pumpWaiting(&c.connWait, &c.spareConnWait, func(s *stream) *bool { return &s.connWait })
}

// pumpOutWait pumps the streams maxOutQueued stopped, in the order they
// stopped, once the writer has taken what was queued (under mu).
func (c *conn) pumpOutWait() {
	c.pumpWaiting(&c.outWait, &c.spareOutWait, func(s *stream) *bool { return &s.outWait })
}

// pumpWaiting pumps the streams of *list, clearing the flag that says a
// stream is on it; *list is swapped for *spare first, so that those
// stopped again go on a list of their own (under mu).
func (c *conn) pumpWaiting(list, spare *[]*stream, flag func(*stream) *bool) {
	w := *list
	*list, *spare = (*spare)[:0], nil
	for i, s := range w {
		*flag(s) = false
		w[i] = nil
		if s.sendLeft > 0 {
			c.pump(s)
		}
	}
	*spare = w[:0]
}

// unwait takes s off *list, if its flag says it is there (under mu).
func unwait(list *[]*stream, s *stream, flag *bool) {
	if *flag {
		*list = slices.DeleteFunc(*list, func(w *stream) bool { return w == s })
		*flag = false
	}
}

// pumpAll pumps every stream with bytes to send: for a change of the
// client's initial stream window (under mu).
func (c *conn) pumpAll() {
	for _, s := range c.streams {
		if s.sendLeft > 0 {
			c.pump(s)
		}
	}
}

// sendTrailers gathers s's status (under mu).
func (c *conn) sendTrailers(s *stream) {
	c.encBuf.Reset()
	if !s.headersSent {
		c.responseHead(s) // trailers only
	}
	c.statusFields(s.st)
	c.fields(s.trailer)
	c.headerBlock(s.id, true)
	if !s.recvDone {
		// The call is over; the client need send no more.
		c.rst(s.id, http2.ErrCodeNo)
	}
}

func (c *conn) statusFields(st *status.Status) {
	c.field("grpc-status", strconv.Itoa(int(st.Code())))
	if msg := st.Message(); msg != "" {
		c.field("grpc-message", encodeMessage(msg))
	}
	if p := st.Proto(); len(p.Details) > 0 {
		if b, err := proto.Marshal(p); err == nil {
			c.field("grpc-status-details-bin", base64.RawStdEncoding.EncodeToString(b))
		}
	}
}

// earlyAbort answers a stream that gets no handler with st alone
// (under mu).
func (c *conn) earlyAbort(id uint32, httpStatus int, st *status.Status, rst bool) {
	c.encBuf.Reset()
	c.field(":status", strconv.Itoa(httpStatus))
	c.field("content-type", "application/grpc")
	c.statusFields(st)
	c.headerBlock(id, true)
	if rst {
		c.rst(id, http2.ErrCodeNo)
	}
	c.kick()
}

// encodeMessage percent-encodes a grpc-message value.
func encodeMessage(msg string) string {
	for i := 0; i < len(msg); i++ {
		if ch := msg[i]; ch < 0x20 || ch > 0x7e || ch == '%' {
			return encodeMessageFrom(msg, i)
		}
	}
	return msg
}

func encodeMessageFrom(msg string, i int) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(msg) + 16)
	b.WriteString(msg[:i])
	for ; i < len(msg); i++ {
		ch := msg[i]
		if ch >= 0x20 && ch <= 0x7e && ch != '%' {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&15])
	}
	return b.String()
}

// opened settles the stream accepted last: open or answered (under mu). A
// drain that came meanwhile closes the connection once it is idle.
func (c *conn) opened() {
	c.opening = false
	c.closeIfDrained()
}

// closeIfDrained has the writer close a drained connection once no stream
// is open and none is being opened (under mu).
func (c *conn) closeIfDrained() {
	if c.draining && len(c.streams) == 0 && !c.opening {
		c.closeIdle = true
		c.kick()
	}
}

// remove forgets s once its call is over (under mu). The reader frees the
// message it was reading on s, if any, when it next takes c.removed
// (dropRemoved): remove may run on a handler's goroutine.
func (c *conn) remove(s *stream) {
	s.closed = true
	if s.deadline != nil {
		s.deadline.Stop()
	}
	delete(c.streams, s.id)
	c.removed = append(c.removed, s)
	c.hasRemoved.Store(true)
	// Forgotten at once, not at the next connection WINDOW_UPDATE (which
	// a client that never grants one would never send) or writer batch.
	unwait(&c.connWait, s, &s.connWait)
	unwait(&c.outWait, s, &s.outWait)
	signal(s.rwake)
	signal(s.swake)
	c.closeIfDrained()
}

// dropRemoved frees the messages half read on removed streams, taken from
// c.removed under mu (reader only, after unlocking).
func (c *conn) dropRemoved(r []*stream) {
	for _, s := range r {
		c.dropPartial(s)
	}
}

// closeStream ends s at once, with st for its handler: the client reset
// it or the connection ended (under mu).
func (c *conn) closeStream(s *stream, st *status.Status) {
	if s.closed {
		return
	}
	for s.sendHead < len(s.sendq) {
		p := &s.sendq[s.sendHead]
		if p.owner != nil {
			if s.headRefd {
				// Its first bytes are gathered and may not be written
				// yet: the writer frees it after it has written them
				// (in the batch being gathered, or the one after the
				// batch it is writing now).
				c.free = append(c.free, p.owner)
				c.kick()
			} else {
				p.owner.Free()
			}
		}
		s.headRefd = false
		*p = sendPart{}
		s.sendHead++
	}
	s.sendq, s.sendHead, s.sendLeft = nil, 0, 0
	if s.recvErr == nil {
		s.recvErr = st.Err()
	}
	c.freeMsgs(s)
	c.remove(s)
	s.cancel()
}

// resetStream ends s with RST_STREAM code (under mu).
func (c *conn) resetStream(s *stream, code http2.ErrCode, st *status.Status) {
	c.rst(s.id, code)
	c.closeStream(s, st)
	c.kick()
}

func (c *conn) freeMsgs(s *stream) {
	for i, m := range s.msgs[s.msgHead:] {
		m.Free()
		s.msgs[s.msgHead+i] = nil
	}
	s.msgs, s.msgHead, s.queuedBytes = s.msgs[:0], 0, 0
}

// msgOverhead is what a queued message costs beyond its bytes (its
// buffer's rounding up and the slice that holds it), counted against the
// stream's window, so that a window's worth of tiny messages does not
// hold many times the window in memory.
const msgOverhead = 256

// msgCharge is what a queued message of n bytes counts against its
// stream's window.
func msgCharge(n int) int64 { return int64(n) + 5 + msgOverhead }
