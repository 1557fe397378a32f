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
	"sync"
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
	return For(md).Check(b)
}

// Validator checks encodings of one message type. It is compiled once from
// the descriptor into a table indexed by field number, so that a check
// walks the bytes without descriptor lookups.
type Validator struct {
	fields []field         // by field number, below denseFields
	sparse map[int32]field // the others
}

// denseFields: fields numbered below this are found by index.
const denseFields = 64

// field is what Check needs of a known field.
type field struct {
	name    string
	known   bool
	kind    fieldKind
	wire    protowire.Type // the scalar wire type (scalars, packed lists)
	list    bool           // a repeated scalar (may come packed)
	message *Validator     // messageField
}

type fieldKind uint8

const (
	scalarField fieldKind = iota
	messageField
	stringField // proto3: must be UTF-8
	bytesField  // bytes, or a proto2 string
	groupField
)

var validators sync.Map // protoreflect.FullName -> *Validator

// For returns the Validator of md, compiling it on first use. Safe for
// concurrent use.
func For(md protoreflect.MessageDescriptor) *Validator {
	if v, ok := validators.Load(md.FullName()); ok {
		return v.(*Validator)
	}
	v := compile(md, map[protoreflect.FullName]*Validator{})
	actual, _ := validators.LoadOrStore(md.FullName(), v)
	return actual.(*Validator)
}

// compile builds md's Validator; seen holds those being built, for
// recursive message types.
func compile(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]*Validator) *Validator {
	if v, ok := seen[md.FullName()]; ok {
		return v
	}
	v := &Validator{}
	seen[md.FullName()] = v
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := field{name: string(fd.Name()), known: true, list: fd.IsList()}
		switch fd.Kind() {
		case protoreflect.MessageKind:
			f.kind, f.message = messageField, compile(fd.Message(), seen)
		case protoreflect.StringKind:
			f.kind = bytesField
			if fd.Syntax() == protoreflect.Proto3 {
				f.kind = stringField
			}
		case protoreflect.BytesKind:
			f.kind = bytesField
		case protoreflect.GroupKind:
			f.kind = groupField
		default:
			f.kind, f.wire = scalarField, scalarWireType(fd.Kind())
		}
		num := int32(fd.Number())
		if num < denseFields {
			if int(num) >= len(v.fields) {
				v.fields = append(v.fields, make([]field, int(num)+1-len(v.fields))...)
			}
			v.fields[num] = f
			continue
		}
		if v.sparse == nil {
			v.sparse = map[int32]field{}
		}
		v.sparse[num] = f
	}
	return v
}

func (v *Validator) field(num protowire.Number) *field {
	if num < denseFields {
		if int(num) < len(v.fields) {
			return &v.fields[num]
		}
		return nil
	}
	if f, ok := v.sparse[int32(num)]; ok {
		return &f
	}
	return nil
}

// Check reports whether b is a valid encoding of v's message type, as the
// package-level Check does.
func (v *Validator) Check(b []byte) error {
	return v.check(b, 0)
}

func (v *Validator) check(b []byte, depth int) error {
	if depth > maxDepth {
		return &Error{Err: errDepth}
	}
	for off := 0; off < len(b); {
		var num protowire.Number
		var typ protowire.Type
		var n int
		if c := b[off]; c >= 1<<3 && c < 0x80 {
			// A one-byte tag (fields 1-15), as most are: what ConsumeTag
			// returns, without the call.
			num, typ, n = protowire.Number(c>>3), protowire.Type(c&7), 1
		} else {
			num, typ, n = protowire.ConsumeTag(b[off:])
		}
		if n < 0 {
			return &Error{Err: fmt.Errorf("tag at byte %d: %w", off, protowire.ParseError(n))}
		}
		if num > protowire.MaxValidNumber {
			return &Error{Err: fmt.Errorf("tag at byte %d: invalid field number %d", off, num)}
		}
		off += n
		f := v.field(num)
		if f == nil || !f.known || !f.wireTypeOK(typ) {
			n = protowire.ConsumeFieldValue(num, typ, b[off:])
			if n < 0 {
				return &Error{Err: fmt.Errorf("field %d at byte %d: %w", num, off, protowire.ParseError(n))}
			}
			off += n
			continue
		}
		if typ != protowire.BytesType {
			// A scalar in its own wire type: any value decodes.
			if typ == protowire.VarintType && off < len(b) && b[off] < 0x80 {
				n = 1 // a one-byte varint, as ConsumeFieldValue would read it
			} else {
				n = protowire.ConsumeFieldValue(num, typ, b[off:])
			}
			if n < 0 {
				return &Error{Path: f.name, Err: protowire.ParseError(n)}
			}
			off += n
			continue
		}
		var val []byte
		if off < len(b) && b[off] < 0x80 && off+1+int(b[off]) <= len(b) {
			// A one-byte length, as ConsumeBytes would read it.
			c := int(b[off])
			val, n = b[off+1:off+1+c], 1+c
		} else if val, n = protowire.ConsumeBytes(b[off:]); n < 0 {
			return &Error{Path: f.name, Err: protowire.ParseError(n)}
		}
		off += n
		if err := f.checkBytes(num, val, depth); err != nil {
			return err
		}
	}
	return nil
}

// checkBytes checks the value of a length-delimited field.
func (f *field) checkBytes(num protowire.Number, val []byte, depth int) error {
	switch f.kind {
	case messageField:
		if err := f.message.check(val, depth+1); err != nil {
			e := err.(*Error)
			if e.Path == "" {
				e.Path = f.name
			} else {
				e.Path = f.name + "." + e.Path
			}
			return e
		}
	case stringField:
		if !utf8.Valid(val) {
			return &Error{Path: f.name, Err: errUTF8}
		}
	case bytesField:
	default:
		// A packed repeated scalar: the elements must fill val exactly.
		for len(val) > 0 {
			n := protowire.ConsumeFieldValue(num, f.wire, val)
			if n < 0 {
				return &Error{Path: f.name, Err: fmt.Errorf("packed: %w", protowire.ParseError(n))}
			}
			val = val[n:]
		}
	}
	return nil
}

// wireTypeOK reports whether proto.Unmarshal decodes the field in wire type
// typ; it treats a field in any other wire type as unknown.
func (f *field) wireTypeOK(typ protowire.Type) bool {
	switch f.kind {
	case messageField, stringField, bytesField:
		return typ == protowire.BytesType
	case groupField:
		return typ == protowire.StartGroupType
	}
	return typ == f.wire || (f.list && typ == protowire.BytesType)
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
