package client

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Client is a connection to one Reverb-compatible server: reverie or
// Reverb itself. It is safe for concurrent use.
type Client struct {
	addr string
	conn *grpc.ClientConn
	rpc  reverbpb.ReverbServiceClient
}

type options struct {
	dialOpts []grpc.DialOption
	tls      bool // WithTLS was given
}

// Option configures Dial.
type Option func(*options)

// WithDialOptions adds gRPC dial options, for example transport
// credentials. By default the connection is plaintext with unlimited
// message sizes, as Reverb's.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// DefaultKeepaliveTime is how long a connection with open calls may carry
// nothing before Dial's connections ping the server, and
// DefaultKeepaliveTimeout how long they then wait for the answer before
// the connection is taken as lost (its calls fail with UNAVAILABLE, and a
// Pool fails over). Five minutes is the least that gRPC C++ servers,
// Reverb's among them, accept by default between pings on a connection
// that sends no data; a client pinging more often is cut off by them with
// "too_many_pings". reverie's server accepts pings every 5 s: against
// reverie alone, grpc.WithKeepaliveParams in WithDialOptions (which
// comes after these defaults) can notice a silent server sooner (gRPC-Go
// pings at most every 10 s).
const (
	DefaultKeepaliveTime    = 5 * time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
)

// Dial connects to addr ("host:port", "dns:///name:port" or
// "unix:///path") and waits until the connection is ready or ctx ends.
// Calls are spread over all of a name's addresses (round_robin); no
// service config is taken from the name resolver (DNS TXT records). When
// ctx ends first, the error wraps both ErrUnavailable and ctx's error
// (context.Canceled or context.DeadlineExceeded), with why the
// connection was not ready when gRPC knows.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	dialOpts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin":{}}]}`),
		// No service config from the name resolver: gRPC-Go's DNS resolver
		// would otherwise look up a TXT record (_grpc_config.HOST) on every
		// Dial, even of localhost, and wait for it before connecting; where
		// the DNS server is slow to answer that, a Dial waited its 5 s
		// timeout. The client's own config above is the one used.
		grpc.WithDisableServiceConfig(),
		experimental.WithBufferPool(wirePool),
		// A server gone silent (a host that lost power, a partition)
		// sends no reset: without pings, streams waiting on it (a
		// sampler blocked by the rate limiter, a Flush) wait until the
		// kernel gives up retransmitting, 15 minutes or more, or for
		// ever when nothing was sent. See DefaultKeepaliveTime.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: DefaultKeepaliveTime, Timeout: DefaultKeepaliveTimeout}),
	}, o.dialOpts...)
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidArgument, addr, err)
	}
	conn.Connect()
	for {
		s := conn.GetState()
		if s == connectivity.Ready {
			break
		}
		if !conn.WaitForStateChange(ctx, s) {
			why := ""
			if s == connectivity.TransientFailure {
				why = "; " + lastConnError(conn)
				if !o.tls && strings.Contains(why, "server preface") {
					why += "; a server that serves TLS ends plaintext connections like this: it may want TLS"
				}
			}
			conn.Close()
			return nil, fmt.Errorf("%w: %s: %w (last state %v%s)", ErrUnavailable, addr, ctx.Err(), s, why)
		}
	}
	return &Client{addr: addr, conn: conn, rpc: reverbpb.NewReverbServiceClient(conn)}, nil
}

// Addr is the address the client dialled.
func (c *Client) Addr() string { return c.addr }

// Close closes the connection. Writers and samplers made from the client
// fail afterwards.
func (c *Client) Close() error { return c.conn.Close() }

// TableInfo describes one table, as ServerInfo reports it.
type TableInfo struct {
	Name            string
	MaxSize         int64
	MaxTimesSampled int32
	CurrentSize     int64
	// Sampler and Remover are the server's selector descriptions.
	Sampler, Remover *reverbpb.KeyDistributionOptions
	RateLimiter      *reverbpb.RateLimiterInfo
	// Signature is nil when the table has none.
	Signature          *tensorflowpb.StructuredValue
	NumEpisodes        int64
	NumDeletedEpisodes int64
	NumUniqueSamples   int64
	// Inserts and Samples count completed calls since the last reset.
	Inserts, Samples int64
}

// ServerInfo returns every table the server holds, by name.
func (c *Client) ServerInfo(ctx context.Context) (map[string]TableInfo, error) {
	resp, err := c.rpc.ServerInfo(ctx, &reverbpb.ServerInfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return nil, fromRPC(ctx, err)
	}
	out := make(map[string]TableInfo, len(resp.GetTableInfo()))
	for _, ti := range resp.GetTableInfo() {
		out[ti.GetName()] = TableInfo{
			Name:               ti.GetName(),
			MaxSize:            ti.GetMaxSize(),
			MaxTimesSampled:    ti.GetMaxTimesSampled(),
			CurrentSize:        ti.GetCurrentSize(),
			Sampler:            ti.GetSamplerOptions(),
			Remover:            ti.GetRemoverOptions(),
			RateLimiter:        ti.GetRateLimiterInfo(),
			Signature:          ti.Signature,
			NumEpisodes:        ti.GetNumEpisodes(),
			NumDeletedEpisodes: ti.GetNumDeletedEpisodes(),
			NumUniqueSamples:   ti.GetNumUniqueSamples(),
			Inserts:            ti.GetRateLimiterInfo().GetInsertStats().GetCompleted(),
			Samples:            ti.GetRateLimiterInfo().GetSampleStats().GetCompleted(),
		}
	}
	return out, nil
}

// MutatePriorities deletes the items with keys in deletes and then sets the
// priorities in updates (key -> priority), in one table.
func (c *Client) MutatePriorities(ctx context.Context, table string, updates map[uint64]float64, deletes []uint64) error {
	req := &reverbpb.MutatePrioritiesRequest{Table: table, DeleteKeys: deletes}
	for k, p := range updates {
		req.Updates = append(req.Updates, &reverbpb.KeyWithPriority{Key: k, Priority: p})
	}
	_, err := c.rpc.MutatePriorities(ctx, req, grpc.WaitForReady(true))
	return fromRPC(ctx, err)
}

// Reset removes every item of a table and zeroes its counters.
func (c *Client) Reset(ctx context.Context, table string) error {
	_, err := c.rpc.Reset(ctx, &reverbpb.ResetRequest{Table: table}, grpc.WaitForReady(true))
	return fromRPC(ctx, err)
}

// Checkpoint asks the server to write a checkpoint and returns its path.
func (c *Client) Checkpoint(ctx context.Context) (string, error) {
	resp, err := c.rpc.Checkpoint(ctx, &reverbpb.CheckpointRequest{})
	if err != nil {
		return "", fromRPC(ctx, err)
	}
	return resp.GetCheckpointPath(), nil
}

// Insert writes one item made of one step: each tensor in step becomes a
// column of one row, in one chunk, and the item goes into every table named
// in priorities with that priority. It returns once the server confirmed
// every insert. It opens a stream per call; use a TrajectoryWriter for
// throughput.
func (c *Client) Insert(ctx context.Context, step []Tensor, priorities map[string]float64) error {
	if len(step) == 0 {
		return fmt.Errorf("%w: Insert: empty step", ErrInvalidArgument)
	}
	if len(priorities) == 0 {
		return fmt.Errorf("%w: Insert: no table priorities", ErrInvalidArgument)
	}
	cols := make([]Tensor, len(step))
	for i, t := range step {
		s, err := Stack([]Tensor{t})
		if err != nil {
			return fmt.Errorf("%w: Insert: column %d: %v", ErrInvalidArgument, i, err)
		}
		cols[i] = s
	}
	chunkKey := NewKey()
	chunk, err := EncodeChunk(chunkKey, &reverbpb.SequenceRange{EpisodeId: NewKey()}, cols, false)
	if err != nil {
		return fmt.Errorf("%w: Insert: %v", ErrInvalidArgument, err)
	}
	traj := &reverbpb.FlatTrajectory{}
	for i := range cols {
		traj.Columns = append(traj.Columns, &reverbpb.FlatTrajectory_Column{
			ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: chunkKey, Length: 1, Index: int32(i)}},
			Squeeze:     true,
		})
	}
	req := &reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk}}
	for table, p := range priorities {
		req.Items = append(req.Items, &reverbpb.PrioritizedItem{Key: NewKey(), Table: table, Priority: p, FlatTrajectory: traj})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if we leave early
	stream, err := c.rpc.InsertStream(ctx)
	if err != nil {
		return fromRPC(ctx, err)
	}
	if err := stream.Send(req); err != nil {
		if _, rerr := stream.Recv(); rerr != nil {
			return fromRPC(ctx, rerr)
		}
		// The request did not go out, yet the server answered: never
		// report such an insert as done.
		return &Error{Sentinel: ErrServer, Code: codes.Internal,
			Msg: fmt.Sprintf("insert: the request was not sent (%v), and the server sent a confirmation anyway", err)}
	}
	// Read every confirmation before half-closing: Reverb 0.14.0 ends the
	// stream as soon as it sees the half-close, dropping confirmations it
	// has not sent yet.
	for confirmed := 0; confirmed < len(req.Items); {
		resp, err := stream.Recv()
		if isEOF(err) {
			return fmt.Errorf("%w: Insert: server confirmed %d of %d items", ErrServer, confirmed, len(req.Items))
		}
		if err != nil {
			return fromRPC(ctx, err)
		}
		confirmed += len(resp.GetKeys())
	}
	if err := stream.CloseSend(); err != nil {
		return fromRPC(ctx, err)
	}
	if _, err := stream.Recv(); err != nil && !isEOF(err) {
		return fromRPC(ctx, err)
	}
	return nil
}

// NewKey returns a random uint64 key, as Reverb's clients use for items,
// chunks and episodes. It draws from math/rand/v2's generator (ChaCha8,
// seeded by the operating system), which is as unique as crypto/rand's
// for this purpose and cheaper: the writer takes two keys per item.
func NewKey() uint64 {
	return rand.Uint64()
}

// timeoutProto converts a sampler timeout: negative waits forever.
func timeoutProto(d time.Duration) *reverbpb.Timeout {
	if d < 0 {
		return &reverbpb.Timeout{Milliseconds: -1}
	}
	return &reverbpb.Timeout{Milliseconds: d.Milliseconds()}
}

// lastConnError returns why conn, in TRANSIENT_FAILURE, cannot connect (a
// refused connection, a certificate the client does not trust): gRPC
// gives it to a call that does not wait for the connection.
func lastConnError(conn *grpc.ClientConn) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := reverbpb.NewReverbServiceClient(conn).ServerInfo(ctx, &reverbpb.ServerInfoRequest{}, grpc.WaitForReady(false))
	if st, ok := status.FromError(err); ok && err != nil {
		return st.Message()
	}
	return "no reason given"
}
