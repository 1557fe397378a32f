package server

import (
	"fmt"
	"math"
	"net"
	"os"
	"time"

	"github.com/reverie-rl/reverie/server/h2grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
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
			Logger:       s.log,
		})
	}
	return grpc.NewServer(
		grpc.Creds(sec.creds),
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
