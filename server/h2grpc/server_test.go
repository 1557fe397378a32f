package h2grpc

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/reverie-rl/reverie/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// The test service, written by hand as generated code would be.
const svcName = "h2grpc.test.Svc"

type testService interface{ isTestService() }

// svc records what its handlers saw.
type svc struct {
	ctxErrs  chan error    // the context's error when Block or Flood ended
	started  chan struct{} // a value each time Block starts, while there is room
	deadline chan time.Time
	sent     atomic.Int64 // messages Flood sent
	md       chan metadata.MD
	peers    chan *peer.Peer
}

func (*svc) isTestService() {}

func newSvc() *svc {
	return &svc{ctxErrs: make(chan error, 16), started: make(chan struct{}, 16), deadline: make(chan time.Time, 16), md: make(chan metadata.MD, 16), peers: make(chan *peer.Peer, 16)}
}

var svcDesc = grpc.ServiceDesc{
	ServiceName: svcName,
	HandlerType: (*testService)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(*svc).echo(ctx, req.(*wrapperspb.BytesValue))
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + svcName + "/Echo"}, h)
		},
	}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Chat", ClientStreams: true, ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error { return srv.(*svc).chat(ss) }},
		{StreamName: "Block", ClientStreams: true, ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error { return srv.(*svc).block(ss) }},
		{StreamName: "Flood", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error { return srv.(*svc).flood(ss) }},
	},
}

func (s *svc) echo(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.md <- md
	p, _ := peer.FromContext(ctx)
	s.peers <- p
	grpc.SetHeader(ctx, metadata.Pairs("x-head", "h1", "x-head-bin", "\x00\xff"))
	grpc.SetTrailer(ctx, metadata.Pairs("x-tail", "t1"))
	if string(in.Value) == "fail" {
		st, err := status.New(codes.FailedPrecondition, "no: é 100%\n").WithDetails(wrapperspb.String("detail"))
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	return in, nil
}

func (s *svc) chat(ss grpc.ServerStream) error {
	for {
		m := new(wrapperspb.BytesValue)
		if err := ss.RecvMsg(m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if string(m.Value) == "boom" {
			return status.Error(codes.InvalidArgument, "boom: the request said so")
		}
		if err := ss.SendMsg(m); err != nil {
			return err
		}
	}
}

func (s *svc) block(ss grpc.ServerStream) error {
	select {
	case s.started <- struct{}{}:
	default: // a test that starts many does not wait for them
	}
	if d, ok := ss.Context().Deadline(); ok {
		s.deadline <- d
	}
	<-ss.Context().Done()
	s.ctxErrs <- ss.Context().Err()
	return ss.Context().Err()
}

func (s *svc) flood(ss grpc.ServerStream) error {
	m := &wrapperspb.BytesValue{Value: make([]byte, 32<<10)}
	for {
		if err := ss.SendMsg(m); err != nil {
			s.ctxErrs <- ss.Context().Err()
			return err
		}
		s.sent.Add(1)
	}
}

// waitStarted waits for a Block handler to start.
func waitStarted(t *testing.T, impl *svc) {
	t.Helper()
	select {
	case <-impl.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the Block handler did not start")
	}
}

// start serves a new svc with opts on loopback until the test ends.
func start(t testing.TB, opts Options) (*Server, *svc, string) {
	t.Helper()
	srv := NewServer(opts)
	impl := newSvc()
	srv.RegisterService(&svcDesc, impl)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, impl, lis.Addr().String()
}

func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var bidi = &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}

func TestUnary(t *testing.T) {
	var order []string
	var mu sync.Mutex
	icpt := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			mu.Lock()
			order = append(order, name+" "+info.FullMethod)
			mu.Unlock()
			return h(ctx, req)
		}
	}
	_, impl, addr := start(t, Options{Unary: []grpc.UnaryServerInterceptor{icpt("a"), icpt("b")}})
	cc := dial(t, addr)
	for _, size := range []int{0, 10, 100 << 10, 5 << 20} {
		in := &wrapperspb.BytesValue{Value: bytes.Repeat([]byte{byte(size)}, size)}
		out := new(wrapperspb.BytesValue)
		var head, tail metadata.MD
		ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-token", "abc", "x-raw-bin", "\x01\x02")
		if err := cc.Invoke(ctx, "/"+svcName+"/Echo", in, out, grpc.Header(&head), grpc.Trailer(&tail), grpc.MaxCallRecvMsgSize(64<<20)); err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if !bytes.Equal(in.Value, out.Value) {
			t.Fatalf("%d bytes: echo differs", size)
		}
		if got := head.Get("x-head"); len(got) != 1 || got[0] != "h1" {
			t.Errorf("header x-head = %q", got)
		}
		if got := head.Get("x-head-bin"); len(got) != 1 || got[0] != "\x00\xff" {
			t.Errorf("header x-head-bin = %q", got)
		}
		if got := tail.Get("x-tail"); len(got) != 1 || got[0] != "t1" {
			t.Errorf("trailer x-tail = %q", got)
		}
		md := <-impl.md
		if got := md.Get("x-token"); len(got) != 1 || got[0] != "abc" {
			t.Errorf("incoming x-token = %q", got)
		}
		if got := md.Get("x-raw-bin"); len(got) != 1 || got[0] != "\x01\x02" {
			t.Errorf("incoming x-raw-bin = %q", got)
		}
		if p := <-impl.peers; p == nil || p.Addr == nil || !strings.HasPrefix(p.Addr.String(), "127.0.0.1:") {
			t.Errorf("peer = %v", p)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 8 || order[0] != "a /"+svcName+"/Echo" || order[1] != "b /"+svcName+"/Echo" {
		t.Errorf("interceptors ran in the order %q", order)
	}
}

func TestStatusDetails(t *testing.T) {
	_, impl, addr := start(t, Options{})
	cc := dial(t, addr)
	var tail metadata.MD
	err := cc.Invoke(ctxT(t), "/"+svcName+"/Echo", wrapperspb.Bytes([]byte("fail")), new(wrapperspb.BytesValue), grpc.Trailer(&tail))
	<-impl.md
	<-impl.peers
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || st.Message() != "no: é 100%\n" {
		t.Fatalf("status %v %q", st.Code(), st.Message())
	}
	if d := st.Details(); len(d) != 1 || d[0].(*wrapperspb.StringValue).GetValue() != "detail" {
		t.Errorf("details %v", d)
	}
	if got := tail.Get("x-tail"); len(got) != 1 {
		t.Errorf("trailer x-tail = %q", got)
	}
}

func TestUnknownMethods(t *testing.T) {
	_, _, addr := start(t, Options{})
	cc := dial(t, addr)
	for path, want := range map[string]string{
		"/" + svcName + "/Nope": "unknown method Nope for service " + svcName,
		"/other.Svc/Echo":       "unknown service other.Svc",
	} {
		err := cc.Invoke(ctxT(t), path, wrapperspb.Bytes(nil), new(wrapperspb.BytesValue))
		if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != want {
			t.Errorf("%s: %v, want UNIMPLEMENTED %q", path, err, want)
		}
	}
	// The connection serves on.
	if err := cc.Invoke(ctxT(t), "/"+svcName+"/Echo", wrapperspb.Bytes([]byte("x")), new(wrapperspb.BytesValue)); err != nil {
		t.Fatal(err)
	}
}

// TestStreamsConcurrent runs 8 streams of 40 kB messages on one connection.
func TestStreamsConcurrent(t *testing.T) {
	_, _, addr := start(t, Options{})
	cc := dial(t, addr)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			st, err := cc.NewStream(ctxT(t), bidi, "/"+svcName+"/Chat")
			if err != nil {
				errs <- err
				return
			}
			go func() {
				for i := range 50 {
					b := bytes.Repeat([]byte{byte(w), byte(i)}, 20000)
					if st.SendMsg(wrapperspb.Bytes(b)) != nil {
						return
					}
				}
				st.CloseSend()
			}()
			for i := range 50 {
				m := new(wrapperspb.BytesValue)
				if err := st.RecvMsg(m); err != nil {
					errs <- fmt.Errorf("stream %d message %d: %v", w, i, err)
					return
				}
				if !bytes.Equal(m.Value, bytes.Repeat([]byte{byte(w), byte(i)}, 20000)) {
					errs <- fmt.Errorf("stream %d message %d differs", w, i)
					return
				}
			}
			if err := st.RecvMsg(new(wrapperspb.BytesValue)); err != io.EOF {
				errs <- fmt.Errorf("stream %d end: %v", w, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStreamError(t *testing.T) {
	_, _, addr := start(t, Options{})
	st, err := dial(t, addr).NewStream(ctxT(t), bidi, "/"+svcName+"/Chat")
	if err != nil {
		t.Fatal(err)
	}
	st.SendMsg(wrapperspb.Bytes([]byte("hi")))
	st.SendMsg(wrapperspb.Bytes([]byte("boom")))
	if err := st.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
		t.Fatal(err)
	}
	err = st.RecvMsg(new(wrapperspb.BytesValue))
	if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != "boom: the request said so" {
		t.Fatalf("got %v", err)
	}
}

func TestDeadlineReachesHandler(t *testing.T) {
	_, impl, addr := start(t, Options{})
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	want, _ := ctx.Deadline()
	st, err := dial(t, addr).NewStream(ctx, bidi, "/"+svcName+"/Block")
	if err != nil {
		t.Fatal(err)
	}
	err = st.RecvMsg(new(wrapperspb.BytesValue))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DEADLINE_EXCEEDED", err)
	}
	select {
	case d := <-impl.deadline:
		// The client sends what is left of its timeout and the server
		// counts it from when it reads the headers, so the server's
		// deadline is later than the client's by at most the time the
		// headers took to arrive, which a loaded machine can stretch:
		// bound it by the time the whole test has taken. Earlier by more
		// than the timeout's encoding can round off is a bug.
		if diff := d.Sub(want); diff > time.Since(begin) || diff < -10*time.Millisecond {
			t.Errorf("handler's deadline %v from the client's (the test has run %v)", diff, time.Since(begin))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler saw no deadline")
	}
	if err := <-impl.ctxErrs; err == nil {
		t.Fatal("handler's context did not end")
	}
}

func TestClientCancel(t *testing.T) {
	_, impl, addr := start(t, Options{})
	ctx, cancel := context.WithCancel(ctxT(t))
	st, err := dial(t, addr).NewStream(ctx, bidi, "/"+svcName+"/Block")
	if err != nil {
		t.Fatal(err)
	}
	st.SendMsg(wrapperspb.Bytes([]byte("x")))
	waitStarted(t, impl)
	cancel()
	select {
	case err := <-impl.ctxErrs:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler's context ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler's context was not cancelled")
	}
}

// TestSlowReader checks that a client that stops reading holds the
// server's sends back (SendMsg blocks) instead of the server queueing
// without bound, and that cancelling frees the handler.
func TestSlowReader(t *testing.T) {
	_, impl, addr := start(t, Options{})
	cc := dial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	ctx, cancel := context.WithCancel(ctxT(t))
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/"+svcName+"/Flood")
	if err != nil {
		t.Fatal(err)
	}
	st.SendMsg(wrapperspb.Bytes(nil))
	st.CloseSend()
	// The handler must come to a stop: its count holds for 200 ms. (A
	// fixed wait before the first look could end before a loaded machine
	// had run the handler that far.)
	sent := impl.sent.Load()
	for deadline := time.Now().Add(10 * time.Second); ; sent = impl.sent.Load() {
		time.Sleep(200 * time.Millisecond)
		again := impl.sent.Load()
		if again == sent && again > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s in, the handler sending to a client that does not read has not stopped (or not begun): %d then %d messages", sent, again)
		}
	}
	// The client's windows (64 KiB) and maxQueuedSend, in 32 KiB messages,
	// and the message in hand.
	if limit := int64((64<<10+maxQueuedSend)/(32<<10) + 2); sent > limit {
		t.Fatalf("%d messages sent to a client that reads none, want at most %d", sent, limit)
	}
	cancel()
	select {
	case <-impl.ctxErrs:
	case <-time.After(5 * time.Second):
		t.Fatal("a handler blocked in SendMsg did not end when the client cancelled")
	}
}

func TestGracefulStop(t *testing.T) {
	srv, _, addr := start(t, Options{})
	cc := dial(t, addr)
	st, err := cc.NewStream(ctxT(t), bidi, "/"+svcName+"/Chat")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.Bytes([]byte("1"))); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with a stream open")
	default:
	}
	// The open stream serves on.
	if err := st.SendMsg(wrapperspb.Bytes([]byte("2"))); err != nil {
		t.Fatal(err)
	}
	m := new(wrapperspb.BytesValue)
	if err := st.RecvMsg(m); err != nil || string(m.Value) != "2" {
		t.Fatalf("after GracefulStop: %q, %v", m.Value, err)
	}
	// A new connection is refused.
	cc2 := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := cc2.Invoke(ctx, "/"+svcName+"/Echo", wrapperspb.Bytes(nil), new(wrapperspb.BytesValue)); err == nil {
		t.Fatal("a new connection was served while stopping")
	}
	st.CloseSend()
	if err := st.RecvMsg(m); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("GracefulStop did not return once the stream ended")
	}
}

func TestStopCancelsHandlers(t *testing.T) {
	srv, impl, addr := start(t, Options{})
	st, err := dial(t, addr).NewStream(ctxT(t), bidi, "/"+svcName+"/Block")
	if err != nil {
		t.Fatal(err)
	}
	st.SendMsg(wrapperspb.Bytes(nil))
	waitStarted(t, impl)
	srv.Stop()
	select {
	case err := <-impl.ctxErrs:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler's context: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not end the handler's context")
	}
	if err := st.RecvMsg(new(wrapperspb.BytesValue)); status.Code(err) != codes.Unavailable {
		t.Fatalf("client got %v, want UNAVAILABLE", err)
	}
}

func TestMessageTooLarge(t *testing.T) {
	_, _, addr := start(t, Options{MaxRecvMsgSize: 1000})
	cc := dial(t, addr)
	err := cc.Invoke(ctxT(t), "/"+svcName+"/Echo", wrapperspb.Bytes(make([]byte, 2000)), new(wrapperspb.BytesValue))
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
		t.Fatalf("got %v", err)
	}
	// The connection serves on.
	if err := cc.Invoke(ctxT(t), "/"+svcName+"/Echo", wrapperspb.Bytes(make([]byte, 10)), new(wrapperspb.BytesValue)); err != nil {
		t.Fatal(err)
	}
}

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	_, impl, addr := start(t, Options{Creds: credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})})
	cc := dial(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})))
	if err := cc.Invoke(ctxT(t), "/"+svcName+"/Echo", wrapperspb.Bytes([]byte("x")), new(wrapperspb.BytesValue)); err != nil {
		t.Fatal(err)
	}
	<-impl.md
	p := <-impl.peers
	if info, ok := p.AuthInfo.(credentials.TLSInfo); !ok || info.State.NegotiatedProtocol != "h2" {
		t.Fatalf("peer AuthInfo %#v, want TLS with ALPN h2", p.AuthInfo)
	}
	// Over TLS the writer copies what it gathers into writes of up to
	// copiedWrite bytes: messages of many frames, on either side of that
	// size, come back whole.
	st, err := cc.NewStream(ctxT(t), bidi, "/"+svcName+"/Chat")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, copiedWrite - 14, copiedWrite - 5, 3*copiedWrite + 7, 1 << 20} {
		msg := make([]byte, n)
		rand.Read(msg)
		if err := st.SendMsg(wrapperspb.Bytes(msg)); err != nil {
			t.Fatal(err)
		}
		got := new(wrapperspb.BytesValue)
		if err := st.RecvMsg(got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Value, msg) {
			t.Fatalf("a message of %d bytes came back as %d different bytes", n, len(got.Value))
		}
	}
	st.CloseSend()
	if err := st.RecvMsg(new(wrapperspb.BytesValue)); err != io.EOF {
		t.Fatalf("end of Chat: %v", err)
	}
	// A plaintext client is not served.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := dial(t, addr).Invoke(ctx, "/"+svcName+"/Echo", wrapperspb.Bytes(nil), new(wrapperspb.BytesValue)); err == nil {
		t.Fatal("plaintext call to a TLS server succeeded")
	}
}

func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func TestServiceInfo(t *testing.T) {
	srv := NewServer(Options{})
	srv.RegisterService(&svcDesc, newSvc())
	info := srv.GetServiceInfo()[svcName]
	if len(info.Methods) != 4 {
		t.Fatalf("methods %v", info.Methods)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a service twice did not panic")
		}
	}()
	srv.RegisterService(&svcDesc, newSvc())
}

// recordingCodec is gRPC's proto codec, recording the buffers each message
// it decodes arrived in.
type recordingCodec struct {
	encoding.CodecV2
	mu   sync.Mutex
	seen [][]int
}

func (c *recordingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	var lens []int
	for _, b := range data {
		lens = append(lens, b.Len())
	}
	c.mu.Lock()
	c.seen = append(c.seen, lens)
	c.mu.Unlock()
	return c.CodecV2.Unmarshal(data, v)
}

// TestSplit: Options.Split cuts large messages where it says, across
// frames, and the messages arrive whole; a cut it cannot make (past the
// message's end) is ignored.
func TestSplit(t *testing.T) {
	codec := &recordingCodec{CodecV2: encoding.GetCodecV2("proto")}
	var calls atomic.Int64
	split := func(method string, left int, head []byte) (int, int, mem.BufferPool) {
		if method != "/"+svcName+"/Chat" {
			t.Errorf("Split asked about %s", method)
		}
		switch calls.Add(1) {
		case 1:
			return 4, 20_000, mem.DefaultBufferPool()
		case 2:
			return 0, 30_000, mem.DefaultBufferPool()
		case 3:
			return 0, 0, nil
		case 4:
			return 1, left, mem.DefaultBufferPool() // past the end: ignored
		}
		return 0, 0, nil
	}
	_, _, addr := start(t, Options{Codec: codec, Split: split, SplitMinBytes: 10_000})
	st, err := dial(t, addr).NewStream(ctxT(t), bidi, "/"+svcName+"/Chat")
	if err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{100_000, 60_000, 500} {
		in := bytes.Repeat([]byte{byte(i + 1), 2, 3}, size/3)
		if err := st.SendMsg(wrapperspb.Bytes(in)); err != nil {
			t.Fatal(err)
		}
		out := new(wrapperspb.BytesValue)
		if err := st.RecvMsg(out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(in, out.Value) {
			t.Fatalf("message %d came back different", i)
		}
	}
	codec.mu.Lock()
	defer codec.mu.Unlock()
	if got := codec.seen[0]; len(got) < 3 || got[0] != 4 || got[1] != 20_000 || got[2] != 30_000 {
		t.Errorf("first message in buffers %v, want 4, 20000, 30000 and the rest", got)
	}
	// Not cut: read in pieces that grow with what has arrived.
	if got := codec.seen[1]; len(got) != 3 || got[0] != minPiece || got[1] != minPiece || got[0]+got[1]+got[2] < 60_000 {
		t.Errorf("second message (an impossible cut) in buffers %v, want %d, %d and the rest", got, minPiece, minPiece)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("Split called %d times, want 4 (the small message is not asked about)", n)
	}
}
