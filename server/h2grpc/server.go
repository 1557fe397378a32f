// Package h2grpc is a gRPC server on an HTTP/2 implementation of reverie's
// own, an alternative to gRPC-Go's transport for reverie's server
// (`reverie serve --transport own`).
//
// It serves the services registered on it (grpc.ServiceDesc, the same
// generated code and handlers as a grpc.Server) to any gRPC client: a
// connection's frames are parsed by one reader goroutine, each stream's
// handler runs on a goroutine of its own, and a writer goroutine per
// connection writes what the handlers and the reader queue, gathered into
// one writev. It saves what gRPC-Go's transport spends on large messages
// (docs/transport-plan.md): each message is read from the connection's
// read buffer once, into a buffer of its own size, and handed to the
// codec; responses are written from the buffers the codec returns,
// without a copy.
//
// What it does, and what it leaves out:
//
//   - HTTP/2 as gRPC uses it (RFC 9113): settings, fixed flow-control
//     windows, HPACK (golang.org/x/net/http2/hpack), PING, RST_STREAM and
//     GOAWAY. No server push, no priorities, and no HTTP/1.
//   - gRPC over it: unary and streaming calls, metadata, grpc-timeout
//     deadlines, statuses with details in trailers, and the interceptors
//     given in Options. Messages are not compressed: a call that asks for
//     a compressor gets UNIMPLEMENTED, as from a gRPC-Go server without
//     one registered.
//   - Transport credentials (TLS, or reverie's local socket) through
//     credentials.TransportCredentials, so peers carry the same AuthInfo.
//   - Limits: concurrent streams per connection (counting handlers still
//     running, so that streams reset at once do not pile up), header
//     block size, message size, control frames queued on a connection that
//     does not read, and a deadline on the handshake.
package h2grpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"reflect"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// Options configure a Server. The zero value of each field picks the
// default its comment gives.
type Options struct {
	// Codec encodes and decodes every message. Default: gRPC's proto codec.
	Codec encoding.CodecV2
	// Creds does each connection's handshake. Default: none (plaintext).
	Creds credentials.TransportCredentials
	// Unary and Stream are interceptors, run first to last around each
	// call's handler.
	Unary  []grpc.UnaryServerInterceptor
	Stream []grpc.StreamServerInterceptor
	// StreamWindow and ConnWindow are the flow-control windows granted to
	// each client, per stream and per connection. Defaults: 1 MiB, 4 MiB.
	StreamWindow, ConnWindow uint32
	// MaxConcurrentStreams bounds the calls running on one connection.
	// Default: 4096.
	MaxConcurrentStreams uint32
	// MaxRecvMsgSize and MaxSendMsgSize bound messages. Default: 2 GiB - 1.
	MaxRecvMsgSize, MaxSendMsgSize int
	// MaxHeaderBlock bounds a request's header block. Default: 64 KiB.
	MaxHeaderBlock int
	// KeepaliveMinTime is the least time a client must leave between
	// PINGs while the server sends it nothing: as gRPC-Go's
	// keepalive.EnforcementPolicy.MinTime, a client that pings more often
	// three times running gets GOAWAY (ENHANCE_YOUR_CALM, "too_many_pings").
	// PINGs are allowed with no stream open. Default: 5 minutes, as
	// gRPC-Go's.
	KeepaliveMinTime time.Duration
	// HandshakeTimeout bounds the TLS handshake and the client's preface.
	// Default: 20 s.
	HandshakeTimeout time.Duration
	// Pool holds the buffers messages are read into. Default: gRPC's.
	Pool mem.BufferPool
	// Split, if set, cuts large messages (SplitMinBytes or more) into
	// buffers where it says, so that a codec can keep some of them as they
	// are instead of copying out of them. It is called at the start of such
	// a message on a call to method (its full name) and again after each
	// cut it made, with left bytes of the message left and the next of them
	// as far as the current frame has them (head, at most 16). It returns
	// k, m and pool: the next k bytes go into a buffer of their own (from
	// Pool), then m bytes into one buffer from pool. k = m = 0 stops the
	// cutting: the rest of the message is read as any other.
	Split func(method string, left int, head []byte) (k, m int, pool mem.BufferPool)
	// SplitMinBytes is the smallest message Split is asked about.
	// Default: 32 KiB.
	SplitMinBytes int
	// Logger reports connections that fail. Default: slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Codec == nil {
		o.Codec = encoding.GetCodecV2("proto")
	}
	if o.Creds == nil {
		o.Creds = insecure.NewCredentials()
	}
	if o.StreamWindow == 0 {
		o.StreamWindow = 1 << 20
	}
	if o.ConnWindow == 0 {
		o.ConnWindow = 4 << 20
	}
	o.StreamWindow = min(o.StreamWindow, math.MaxInt32)
	if o.SplitMinBytes <= 0 {
		o.SplitMinBytes = 32 << 10
	}
	o.ConnWindow = min(max(o.ConnWindow, 65535), math.MaxInt32)
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = 4096
	}
	if o.MaxRecvMsgSize <= 0 {
		o.MaxRecvMsgSize = math.MaxInt32
	}
	if o.MaxSendMsgSize <= 0 {
		o.MaxSendMsgSize = math.MaxInt32
	}
	if o.MaxHeaderBlock <= 0 {
		o.MaxHeaderBlock = 64 << 10
	}
	if o.KeepaliveMinTime <= 0 {
		o.KeepaliveMinTime = 5 * time.Minute
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 20 * time.Second
	}
	if o.Pool == nil {
		o.Pool = mem.DefaultBufferPool()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Server serves registered gRPC services on its own HTTP/2 connections.
// It has the methods of grpc.Server that reverie's server uses, so that
// either can serve the same handlers.
type Server struct {
	opts       Options
	unaryChain grpc.UnaryServerInterceptor

	mu        sync.Mutex
	methods   map[string]*method // by "/service/method"
	services  map[string]grpc.ServiceInfo
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	shaking   map[net.Conn]struct{} // accepted, in their handshake
	serving   bool                  // a call to Serve has begun; no more registrations
	closed    bool                  // GracefulStop or Stop has begun
	connsDone sync.WaitGroup        // the goroutine of each accepted connection
	serves    sync.WaitGroup        // running calls to Serve
}

// method is one registered method and the service value it calls.
type method struct {
	name   string // "/service/method"
	impl   any
	unary  *grpc.MethodDesc
	stream *grpc.StreamDesc
}

// NewServer returns a server with opts; register services, then Serve.
func NewServer(opts Options) *Server {
	opts.setDefaults()
	s := &Server{
		opts:      opts,
		methods:   map[string]*method{},
		services:  map[string]grpc.ServiceInfo{},
		listeners: map[net.Listener]struct{}{},
		conns:     map[*conn]struct{}{},
		shaking:   map[net.Conn]struct{}{},
	}
	s.unaryChain = chainUnary(opts.Unary)
	return s
}

// RegisterService registers a service and its implementation, as
// grpc.Server.RegisterService does. It panics on a programming error: a
// service registered twice, an implementation of the wrong type, or a
// registration after Serve.
func (s *Server) RegisterService(sd *grpc.ServiceDesc, impl any) {
	if impl != nil {
		ht := reflect.TypeOf(sd.HandlerType).Elem()
		if st := reflect.TypeOf(impl); !st.Implements(ht) {
			panic(fmt.Sprintf("h2grpc: RegisterService: %v does not implement %v", st, ht))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving {
		panic("h2grpc: RegisterService after Serve")
	}
	if _, dup := s.services[sd.ServiceName]; dup {
		panic("h2grpc: RegisterService: service " + sd.ServiceName + " registered twice")
	}
	info := grpc.ServiceInfo{Metadata: sd.Metadata}
	for i := range sd.Methods {
		m := &sd.Methods[i]
		s.methods["/"+sd.ServiceName+"/"+m.MethodName] = &method{name: "/" + sd.ServiceName + "/" + m.MethodName, impl: impl, unary: m}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: m.MethodName})
	}
	for i := range sd.Streams {
		d := &sd.Streams[i]
		s.methods["/"+sd.ServiceName+"/"+d.StreamName] = &method{name: "/" + sd.ServiceName + "/" + d.StreamName, impl: impl, stream: d}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: d.StreamName, IsClientStream: d.ClientStreams, IsServerStream: d.ServerStreams})
	}
	s.services[sd.ServiceName] = info
}

// GetServiceInfo returns the registered services, as
// grpc.Server.GetServiceInfo does (server reflection lists them).
func (s *Server) GetServiceInfo() map[string]grpc.ServiceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]grpc.ServiceInfo, len(s.services))
	for k, v := range s.services {
		out[k] = v
	}
	return out
}

func (s *Server) lookup(path string) *method {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.methods[path]
}

// Serve accepts connections on l and serves each on goroutines of its
// own. It returns nil once GracefulStop or Stop has been called (closing
// l), grpc.ErrServerStopped if called after them, or the error of an
// Accept that failed for good. l is closed when Serve returns.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	s.serving = true
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return grpc.ErrServerStopped
	}
	s.listeners[l] = struct{}{}
	s.serves.Add(1)
	s.mu.Unlock()
	defer s.serves.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()

	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			done := s.closed
			s.mu.Unlock()
			if done {
				return nil
			}
			var ne interface{ Temporary() bool }
			if errors.As(err, &ne) && ne.Temporary() {
				// Out of file descriptors, say: wait and try again, as
				// net/http and gRPC-Go do.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.opts.Logger.Warn("h2grpc: accept failed; retrying", "err", err, "after", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.connsDone.Add(1)
		s.shaking[nc] = struct{}{}
		s.mu.Unlock()
		go s.handle(nc)
	}
}

// handle does the handshake on nc and serves it until it ends.
func (s *Server) handle(nc net.Conn) {
	defer s.connsDone.Done()
	setUserTimeout(nc, userTimeout)
	nc.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	conn, auth, err := s.opts.Creds.ServerHandshake(nc)
	s.mu.Lock()
	delete(s.shaking, nc)
	s.mu.Unlock()
	if err != nil {
		nc.Close()
		if !errors.Is(err, net.ErrClosed) {
			s.opts.Logger.Debug("h2grpc: handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		}
		return
	}
	c := newConn(s, conn, auth)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	err = c.serve()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if err != nil && !isClosedErr(err) {
		s.opts.Logger.Debug("h2grpc: connection ended", "remote", nc.RemoteAddr().String(), "err", err)
	}
}

// GracefulStop stops accepting connections, tells each client with GOAWAY
// to open no more streams, and waits for the open streams to end. Each
// connection closes once its streams have ended.
func (s *Server) GracefulStop() {
	s.mu.Lock()
	s.closeListeners()
	for c := range s.conns {
		c.drain()
	}
	s.mu.Unlock()
	s.serves.Wait()
	s.connsDone.Wait()
}

// Stop closes every listener and connection at once: open streams end, and
// their handlers see their contexts cancelled. It waits for the handlers
// to return.
func (s *Server) Stop() {
	s.mu.Lock()
	s.closeListeners()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.serves.Wait()
	s.connsDone.Wait()
}

// closeListeners marks s closed, closes its listeners and the connections
// still in their handshake (under mu).
func (s *Server) closeListeners() {
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for nc := range s.shaking {
		nc.Close()
	}
}

func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, errClientGone)
}

// chainUnary runs ints first to last around a unary handler, or is nil.
func chainUnary(ints []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	switch len(ints) {
	case 0:
		return nil
	case 1:
		return ints[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return ints[0](ctx, req, info, unaryHandlerAt(ints, 1, info, h))
	}
}

func unaryHandlerAt(ints []grpc.UnaryServerInterceptor, i int, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) grpc.UnaryHandler {
	if i == len(ints) {
		return final
	}
	return func(ctx context.Context, req any) (any, error) {
		return ints[i](ctx, req, info, unaryHandlerAt(ints, i+1, info, final))
	}
}

// streamHandler runs ints first to last around a stream handler.
func streamHandler(ints []grpc.StreamServerInterceptor, i int, info *grpc.StreamServerInfo, final grpc.StreamHandler) grpc.StreamHandler {
	if i == len(ints) {
		return final
	}
	return func(srv any, ss grpc.ServerStream) error {
		return ints[i](srv, ss, info, streamHandler(ints, i+1, info, final))
	}
}
