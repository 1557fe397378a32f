"""Hand-assembled protobuf wire bytes for the writer's hot path.

The writer keeps every chunk and item as serialized bytes (chunks are
encoded once and may be re-sent after a reconnect) and builds each
InsertStreamRequest by concatenating them. Building these few small
messages by hand costs a fraction of going through message objects:

  InsertStreamRequest: 1 chunks (ChunkData), 2 items (PrioritizedItem),
    3 keep_chunk_keys (packed varints).
  ChunkData: 1 chunk_key, 2 sequence_range {1 episode_id, 2 start, 3 end,
    4 sparse}, 4 delta_encoded, 5 data {1 tensors (TensorProto)},
    6 data_tensors_len, 7 data_uncompressed_size.
  TensorProto: 1 dtype, 2 tensor_shape {2 dim {1 size}}, 4 tensor_content.
  PrioritizedItem: 1 key, 2 table, 5 priority (double), 8 flat_trajectory
    {1 columns {1 chunk_slices {1 chunk_key, 2 offset, 3 length, 4 index},
    2 squeeze}}.

Fields are written in field-number order and zero values are omitted, as
protobuf's deterministic serialization does; tests/test_encoding.py checks
the bytes against the protobuf library.
"""

import struct

_pack_double = struct.Struct('<d').pack
_SMALL = [bytes((i,)) for i in range(128)]


def varint(v):
  """The varint encoding of an int in [0, 2**64)."""
  if v < 0x80:
    return _SMALL[v]
  # Lengths and step numbers mostly take two or three bytes; random keys
  # come with their encoding (_keys.new_key_varint).
  if v < 0x4000:
    return bytes(((v & 0x7f) | 0x80, v >> 7))
  if v < 0x200000:
    return bytes(((v & 0x7f) | 0x80, ((v >> 7) & 0x7f) | 0x80, v >> 14))
  out = bytearray()
  while v >= 0x80:
    out.append((v & 0x7f) | 0x80)
    v >>= 7
  out.append(v)
  return bytes(out)


def field_bytes(tag, payload):
  """A length-delimited field: tag byte, varint length, payload."""
  n = len(payload)
  return tag + (_SMALL[n] if n < 0x80 else varint(n)) + payload


def insert_request(chunks, items, keep_keys):
  """InsertStreamRequest bytes from serialized chunks and items."""
  parts = []
  append = parts.append
  for c in chunks:
    append(b'\x0a')
    append(varint(len(c)))
    append(c)
  for it in items:
    append(b'\x12')
    append(varint(len(it)))
    append(it)
  if keep_keys:
    packed = b''.join(map(varint, keep_keys))
    append(b'\x1a')
    append(varint(len(packed)))
    append(packed)
  return b''.join(parts)


# TensorProto bytes before tensor_content, by (dtype, shape): a writer's
# chunks of a column mostly share both. Bounded, as shapes are the caller's.
_tensor_heads = {}
_MAX_TENSOR_HEADS = 4096


def tensor_proto(dtype, shape, content):
  """TensorProto bytes (the shape is always present, even for scalars)."""
  key = (dtype, tuple(shape))
  head = _tensor_heads.get(key)
  if head is None:
    dims = b''.join([b'\x12\x02\x08' + _SMALL[d] if 0 < d < 0x80 else
                     field_bytes(b'\x12', b'\x08' + varint(d) if d else b'')
                     for d in shape])
    head = b'\x08' + varint(dtype) + field_bytes(b'\x12', dims)
    if len(_tensor_heads) < _MAX_TENSOR_HEADS:
      _tensor_heads[key] = head
  if content:
    return head + field_bytes(b'\x22', content)
  return head


def sequence_range(episode_varint, start, end, sparse):
  """SequenceRange bytes; episode_varint is varint(episode_id) (or b'' for
  episode 0)."""
  out = b'\x08' + episode_varint if episode_varint != b'\x00' else b''
  if start:
    out += b'\x10' + varint(start)
  if end:
    out += b'\x18' + varint(end)
  if sparse:
    out += b'\x20\x01'
  return out


def chunk_data(key_varint, seq_range, tensors, delta, uncompressed_size):
  """ChunkData bytes from varint(chunk_key), SequenceRange bytes and
  TensorProto bytes."""
  out = b'\x08' + key_varint if key_varint != b'\x00' else b''
  out += field_bytes(b'\x12', seq_range)
  if delta:
    out += b'\x20\x01'
  out += field_bytes(b'\x2a', b''.join(
      [field_bytes(b'\x0a', t) for t in tensors]))
  if tensors:
    out += b'\x30' + varint(len(tensors))
  if uncompressed_size:
    out += b'\x38' + varint(uncompressed_size)
  return out


def chunk_slice(key_varint, offset, length, index=0):
  """FlatTrajectory.ChunkSlice bytes from varint(chunk_key)."""
  out = b'\x08' + key_varint if key_varint != b'\x00' else b''
  if offset:
    out += b'\x10' + varint(offset)
  if length:
    out += b'\x18' + varint(length)
  if index:
    out += b'\x20' + varint(index)
  return out


def slice_field(key_varint, offset, length):
  """A FlatTrajectory.Column.chunk_slices field: tag, length and the
  ChunkSlice bytes."""
  return field_bytes(b'\x0a', chunk_slice(key_varint, offset, length))


def column_of_fields(slice_fields, squeeze):
  """FlatTrajectory.Column bytes from chunk_slices fields (slice_field)."""
  out = b''.join(slice_fields)
  if squeeze:
    out += b'\x10\x01'
  return out


def column(slices, squeeze):
  """FlatTrajectory.Column bytes from ChunkSlice bytes."""
  return column_of_fields([field_bytes(b'\x0a', s) for s in slices], squeeze)


def table_field(table):
  """The PrioritizedItem.table field (tag, length, utf-8 name)."""
  return field_bytes(b'\x12', table.encode('utf-8')) if table else b''


def prioritized_item(key_varint, table_field_bytes, priority, columns):
  """PrioritizedItem bytes from varint(key), table_field(table), the
  priority and Column bytes."""
  out = b'\x08' + key_varint if key_varint != b'\x00' else b''
  out += table_field_bytes
  if priority or str(priority) == '-0.0':
    out += b'\x29' + _pack_double(priority)
  out += field_bytes(b'\x42', b''.join(
      [field_bytes(b'\x0a', c) for c in columns]))
  return out
