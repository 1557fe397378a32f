package server

import (
	"fmt"
	"math"
	"net"
	"os"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/server/h2grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// The transports Config.Transport names.
const (
	// TransportGRPC is gRPC-Go's HTTP/2 server, the default.
	TransportGRPC = "grpc"
	// TransportOwn is reverie's own HTTP/2 server (package h2grpc): the
	// same service to the same clients, at less CPU per large message
	// (docs/transport-plan.md). Experimental.
	TransportOwn = "own"
)

// TransportEnv names the environment variable that picks the transport
// when the config names none: a way to move whole deployments, or test
// suites, to the other transport without editing their configs.
const TransportEnv = "REVERIE_TRANSPORT"

// transport is the transport cfg names, or else TransportEnv's, or else
// gRPC-Go's.
func (c *Config) transport() string {
	if c.Transport != "" {
		return c.Transport
	}
	if t := os.Getenv(TransportEnv); t != "" {
		return t
	}
	return TransportGRPC
}

func checkTransport(t string) string {
	switch t {
	case "", TransportGRPC, TransportOwn:
		return ""
	}
	return fmt.Sprintf("want %q or %q, got %q", TransportGRPC, TransportOwn, t)
}

// rpcServer is what the server uses of its gRPC server, whichever
// transport serves it.
type rpcServer interface {
	grpc.ServiceRegistrar
	GetServiceInfo() map[string]grpc.ServiceInfo
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

var (
	_ rpcServer = (*grpc.Server)(nil)
	_ rpcServer = (*h2grpc.Server)(nil)
)

// newRPCServer builds the gRPC server of s.cfg.Transport, with the
// handshake and interceptors in sec.
func (s *Server) newRPCServer(sec secured) rpcServer {
	if s.cfg.transport() == TransportOwn {
		return h2grpc.NewServer(h2grpc.Options{
			Codec:        newCodec(s.chunks),
			Creds:        sec.creds,
			Unary:        sec.unary,
			Stream:       sec.stream,
			StreamWindow: StreamWindowBytes,
			ConnWindow:   ConnWindowBytes,
			Pool:         transportPool,
			Split:        chunkBodies{s.chunks}.split,
			// As the policy given to gRPC-Go's transport below.
			KeepaliveMinTime: 5 * time.Second,
			Logger:           s.log,
		})
	}
	return grpc.NewServer(
		grpc.Creds(sec.creds),
		// Stop (Close, and Shutdown when its context ends) returns only
		// once every handler has, as h2grpc's does: the server closes the
		// log and the chunk store that handlers use right after. Every
		// handler's waits end with its stream's context, which Stop ends.
		grpc.WaitForHandlers(true),
		grpc.ChainUnaryInterceptor(sec.unary...),
		grpc.ChainStreamInterceptor(sec.stream...),
		// Reverb lifts gRPC's message size limits: an insert request can
		// carry tens of MiB and a sample response whole chunks of any size.
		grpc.MaxRecvMsgSize(math.MaxInt32),
		grpc.MaxSendMsgSize(math.MaxInt32),
		// Fixed flow-control windows instead of gRPC-Go's estimate of
		// each connection's bandwidth-delay product. Under that estimate
		// the connections that moved most were given the largest
		// windows, and a starved one kept 64 KiB, less than two 40 kB
		// items per window update: with 8 writers on a busy server one
		// writer got 10x the items of another, and p99 confirmation
		// latency was 170-240 ms against 52-57 ms with these windows.
		grpc.InitialWindowSize(StreamWindowBytes),
		grpc.InitialConnWindowSize(ConnWindowBytes),
		grpc.WriteBufferSize(writeBufferBytes),
		// Chunks pass through as the bytes they arrived in (codec.go).
		grpc.ForceServerCodecV2(newCodec(s.chunks)),
		// Read buffers are not zeroed before gRPC reads into them.
		experimental.BufferPool(transportPool),
		// Idle writers and blocked samplers keep streams open for long;
		// do not punish clients for keepalive pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             5 * time.Second,
			PermitWithoutStream: true,
		}),
	)
}

// insertStreamMethod is the full name of InsertStream.
var insertStreamMethod = "/" + reverbpb.ReverbService_ServiceDesc.ServiceName + "/InsertStream"

// chunkBodies lets reverie's own transport read each large chunk of an
// insert request into a buffer of its own from the chunk store's
// (AllocChunk). The chunk's encoding is then a buffer the store can keep
// as it is, and the codec takes it instead of copying it
// (sliceReader.take): one copy of each byte after the kernel's, out of the
// connection's read buffer.
type chunkBodies struct{ store *chunkstore.Store }

// split is h2grpc's Options.Split: each chunk of 32 KiB or more goes into
// a buffer of the store's of its own size, its tag and length into a small
// one. Cutting stops at the first field that is not such a chunk: smaller
// chunks, the items and the keys are read as usual.
func (p chunkBodies) split(method string, left int, head []byte) (int, int, mem.BufferPool) {
	if method != insertStreamMethod || len(head) < 2 ||
		head[0] != byte(protowire.EncodeTag(insertChunksField, protowire.BytesType)) {
		return 0, 0, nil
	}
	n, k := protowire.ConsumeVarint(head[1:])
	if k < 0 || uint64(left-1-k) < n {
		return 0, 0, nil
	}
	if n < chunkstore.RecycleMinBytes {
		// Small chunks are copied as usual; a buffer each would cost more
		// than it saves (a request of 400 B items holds thousands).
		return 0, 0, nil
	}
	return 1 + k, int(n), p
}

// Get returns a buffer of the store's for the rest of a split request, or
// one of the transport's if the store has none of that size.
func (p chunkBodies) Get(n int) *[]byte {
	if b := p.store.AllocChunk(n); b != nil {
		return &b
	}
	return transportPool.Get(n)
}

// Put takes back a buffer the codec did not keep: a request that failed,
// or whose chunk was a duplicate.
func (p chunkBodies) Put(b *[]byte) {
	if !p.store.FreeChunk(*b) {
		transportPool.Put(b)
	}
}
