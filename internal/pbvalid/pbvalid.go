// Package pbvalid checks that bytes are a valid protobuf encoding of a
// message without decoding them: Check fails exactly when proto.Unmarshal
// (with default options) into that message type would fail. It lets the
// server keep a message's bytes as they arrived, and pass them on later,
// with the guarantee that every reader can decode them.
//
// Check allocates nothing on success and is safe for concurrent use.
package pbvalid

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// maxDepth is proto.Unmarshal's default recursion limit.
const maxDepth = 10000

var (
	errDepth = errors.New("exceeded maximum recursion depth")
	errUTF8  = errors.New("string field contains invalid UTF-8")
)

// Error is a Check failure: Err, in the field at Path (dot-separated
// names from the checked message; empty for the message itself).
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Check reports whether b is a valid encoding of a message of type md. The
// error names the field path (e.g. "data.tensors[0].tensor_shape") and the
// problem; it is an *Error.
func Check(md protoreflect.MessageDescriptor, b []byte) error {
	if err := check(md, b, 0); err != nil {
		return err
	}
	return nil
}

func check(md protoreflect.MessageDescriptor, b []byte, depth int) error {
	if depth > maxDepth {
		return &Error{Err: errDepth}
	}
	fields := md.Fields()
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return &Error{Err: fmt.Errorf("tag at byte %d: %w", off, protowire.ParseError(n))}
		}
		if num > protowire.MaxValidNumber {
			return &Error{Err: fmt.Errorf("tag at byte %d: invalid field number %d", off, num)}
		}
		off += n
		fd := fields.ByNumber(num)
		if fd == nil || !wireTypeOK(fd, typ) {
			n = protowire.ConsumeFieldValue(num, typ, b[off:])
			if n < 0 {
				return &Error{Err: fmt.Errorf("field %d at byte %d: %w", num, off, protowire.ParseError(n))}
			}
			off += n
			continue
		}
		if typ != protowire.BytesType {
			// A scalar in its own wire type: any value decodes.
			n = protowire.ConsumeFieldValue(num, typ, b[off:])
			if n < 0 {
				return &Error{Path: string(fd.Name()), Err: protowire.ParseError(n)}
			}
			off += n
			continue
		}
		v, n := protowire.ConsumeBytes(b[off:])
		if n < 0 {
			return &Error{Path: string(fd.Name()), Err: protowire.ParseError(n)}
		}
		off += n
		if err := checkBytesField(fd, v, depth); err != nil {
			return err
		}
	}
	return nil
}

// checkBytesField checks the value of a length-delimited field.
func checkBytesField(fd protoreflect.FieldDescriptor, v []byte, depth int) error {
	switch fd.Kind() {
	case protoreflect.MessageKind:
		if err := check(fd.Message(), v, depth+1); err != nil {
			e := err.(*Error)
			if e.Path == "" {
				e.Path = string(fd.Name())
			} else {
				e.Path = string(fd.Name()) + "." + e.Path
			}
			return e
		}
	case protoreflect.StringKind:
		if fd.Syntax() == protoreflect.Proto3 && !utf8.Valid(v) {
			return &Error{Path: string(fd.Name()), Err: errUTF8}
		}
	case protoreflect.BytesKind:
	default:
		// A packed repeated scalar: the elements must fill v exactly.
		typ := scalarWireType(fd.Kind())
		for len(v) > 0 {
			n := protowire.ConsumeFieldValue(fd.Number(), typ, v)
			if n < 0 {
				return &Error{Path: string(fd.Name()), Err: fmt.Errorf("packed: %w", protowire.ParseError(n))}
			}
			v = v[n:]
		}
	}
	return nil
}

// wireTypeOK reports whether proto.Unmarshal decodes a field fd in wire
// type typ into fd; it treats a field in any other wire type as unknown.
func wireTypeOK(fd protoreflect.FieldDescriptor, typ protowire.Type) bool {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.StringKind, protoreflect.BytesKind:
		return typ == protowire.BytesType
	case protoreflect.GroupKind:
		return typ == protowire.StartGroupType
	}
	want := scalarWireType(fd.Kind())
	return typ == want || (fd.IsList() && typ == protowire.BytesType)
}

func scalarWireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}
