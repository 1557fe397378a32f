package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"slices"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/pbvalid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A request that does not decode is the client's fault: INVALID_ARGUMENT,
// naming the field. gRPC-Go reports an error of its codec as INTERNAL
// ("grpc: failed to unmarshal the received message"), and writes that
// status before the handler sees the error. So the codec does not fail:
// it leaves the message empty but for an unknown field that carries the
// error, which the handlers' wrappers (reverbServiceDesc) find and answer.
// The field holds a nonce drawn at start, so that no client can forge it.
// InsertStream's codec has its own way (insertRequest.err).

// decodeErrField is the unknown field that carries a decoding error: the
// largest field number, which no Reverb message uses.
const decodeErrField = protowire.MaxValidNumber

var decodeErrNonce = func() []byte {
	b := make([]byte, 16)
	rand.Read(b)
	return b
}()

// setDecodeError empties m and records err in it for decodeErrorOf. The
// error names the field when pbvalid finds it.
func setDecodeError(data mem.BufferSlice, m proto.Message, err error) {
	// Only on this path: the bytes are joined and checked again.
	if verr := pbvalid.For(m.ProtoReflect().Descriptor()).Check(data.Materialize()); verr != nil {
		err = verr
	}
	proto.Reset(m)
	b := protowire.AppendTag(nil, decodeErrField, protowire.BytesType)
	b = protowire.AppendBytes(b, append(slices.Clone(decodeErrNonce), err.Error()...))
	m.ProtoReflect().SetUnknown(b)
}

// isReverbRequest reports whether m is one of ReverbService's messages,
// whose handlers reverbServiceDesc wraps. The server's other services
// (health, reflection) decode through the same codec, unwrapped: their
// errors stay the codec's (a malformed health check once read as an
// empty one, and was answered SERVING).
func isReverbRequest(m proto.Message) bool {
	return m.ProtoReflect().Descriptor().ParentFile().Package() == reverbPackage
}

var reverbPackage = (&reverbpb.ResetRequest{}).ProtoReflect().Descriptor().ParentFile().Package()

// decodeErrorOf returns the INVALID_ARGUMENT status of a message that did
// not decode, or nil.
func decodeErrorOf(v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return nil
	}
	u := m.ProtoReflect().GetUnknown()
	if len(u) == 0 {
		return nil
	}
	num, typ, n := protowire.ConsumeTag(u)
	if n < 0 || num != decodeErrField || typ != protowire.BytesType {
		return nil
	}
	b, k := protowire.ConsumeBytes(u[n:])
	if k < 0 || n+k != len(u) || !bytes.HasPrefix(b, decodeErrNonce) {
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "%v: %s", ErrInvalidRequest, b[len(decodeErrNonce):])
}

// reverbServiceDesc is ReverbService's description with each handler's
// requests checked by decodeErrorOf. InsertStream is left as it is: its
// codec reports errors through the request, which its handler maps.
func reverbServiceDesc() *grpc.ServiceDesc {
	d := reverbpb.ReverbService_ServiceDesc
	d.Methods = slices.Clone(d.Methods)
	for i := range d.Methods {
		h := d.Methods[i].Handler
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error {
				if err := dec(v); err != nil {
					return err
				}
				return decodeErrorOf(v)
			}, icpt)
		}
	}
	d.Streams = slices.Clone(d.Streams)
	for i := range d.Streams {
		if d.Streams[i].StreamName == "InsertStream" {
			continue
		}
		h := d.Streams[i].Handler
		d.Streams[i].Handler = func(srv any, ss grpc.ServerStream) error { return h(srv, decodeStream{ss}) }
	}
	return &d
}

// decodeStream is a ServerStream whose RecvMsg reports a request that did
// not decode as INVALID_ARGUMENT.
type decodeStream struct{ grpc.ServerStream }

func (s decodeStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return decodeErrorOf(m)
}
