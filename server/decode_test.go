package server_test

import (
	"strings"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// rawCodec sends and receives messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestMalformedRequestsAreInvalidArgument: a request that does not decode
// is the client's fault, INVALID_ARGUMENT naming the field, on every call.
// Only InsertStream's were; gRPC-Go reports its codec's errors as
// INTERNAL, "failed to unmarshal", and that was what MutatePriorities,
// Reset, SampleStream and InitializeConnection answered (found by review).
func TestMalformedRequestsAreInvalidArgument(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("u", 10, server.MinSize(1))))
	conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	badTable := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{'u', 0xff})
	truncated := protowire.AppendTag(nil, 1, protowire.BytesType) // no length
	const svc = "/deepmind.reverb.ReverbService/"
	for _, tc := range []struct {
		method string
		stream bool
		req    []byte
		want   string
	}{
		{"MutatePriorities", false, badTable, "server: invalid request: table: string field contains invalid UTF-8"},
		{"MutatePriorities", false, truncated, "server: invalid request"},
		{"Reset", false, badTable, "server: invalid request: table: string field contains invalid UTF-8"},
		{"SampleStream", true, badTable, "server: invalid request: table: string field contains invalid UTF-8"},
		{"InitializeConnection", true, truncated, "server: invalid request"},
	} {
		t.Run(tc.method, func(t *testing.T) {
			ctx := ctxT(t)
			var resp []byte
			if !tc.stream {
				err = conn.Invoke(ctx, svc+tc.method, &tc.req, &resp)
			} else {
				var st grpc.ClientStream
				st, err = conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, svc+tc.method)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.SendMsg(&tc.req); err != nil {
					t.Fatal(err)
				}
				err = st.RecvMsg(&resp)
			}
			if msg := status.Convert(err).Message(); status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(msg, tc.want) {
				t.Fatalf("%s: %v, want InvalidArgument %q", tc.method, err, tc.want)
			}
		})
	}
	// A malformed health check is not read as an empty one (whose answer
	// would be SERVING for the whole server): the error stays gRPC's.
	var resp []byte
	err = conn.Invoke(ctxT(t), "/grpc.health.v1.Health/Check", &badTable, &resp)
	if status.Code(err) == codes.OK {
		t.Fatalf("malformed health check answered %x", resp)
	}
	// The server goes on serving.
	if _, err := s.Client.Reset(ctxT(t), &reverbpb.ResetRequest{Table: "u"}); err != nil {
		t.Fatalf("Reset after the malformed requests: %v", err)
	}
}
