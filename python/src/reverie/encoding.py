"""Chunk encoding: numpy arrays to and from Reverb's TensorProto layout.

The format is Reverb's chunk encoding, bit for bit, as Reverb's
C++ client writes and reads it:

* A chunk holds one or more tensors; each is a column of consecutive steps
  batched along a new leading axis (a step of shape S gives [T, *S]).
* Non-string tensors: ``tensor_content`` is the raw Snappy *block* format
  (not the framed format) of the row-major little-endian element bytes
  (bool one byte, float16 two, complex as (re, im) pairs).
* DT_STRING tensors are not compressed: ``tensor_content`` is the varint32
  length of every element, in row-major order, followed by the bytes of all
  elements in the same order.
* Delta encoding (chunk flag ``delta_encoded``) applies only to integer
  tensors of rank >= 2: viewed as a [T, N] matrix in the unsigned type of
  the same width, row i >= 1 is replaced by row i minus row i-1, wrapping
  around. Decoding is a cumulative sum along the first axis.

Everything here is vectorised with numpy: no Python-level loop runs per
element. String tensors touch every element once through C-level ``map``,
``bytes.join`` and slicing, never through Python bytecode per element.
Decoded DT_STRING tensors are numpy object arrays of ``bytes``, as
TensorFlow's ``.numpy()`` returns them.
"""

import math

import cramjam
import numpy as np

from reverie import errors
from reverie._proto.deepmind.reverb import schema_pb2
from reverie._proto.tensorflow import tensor_pb2
from reverie._proto.tensorflow import tensor_shape_pb2

_snappy = cramjam.snappy

# TensorFlow DataType values (tensorflow/types.proto).
DT_INVALID = 0
DT_FLOAT = 1
DT_DOUBLE = 2
DT_INT32 = 3
DT_UINT8 = 4
DT_INT16 = 5
DT_INT8 = 6
DT_STRING = 7
DT_COMPLEX64 = 8
DT_INT64 = 9
DT_BOOL = 10
DT_QINT8 = 11
DT_QUINT8 = 12
DT_QINT32 = 13
DT_BFLOAT16 = 14
DT_QINT16 = 15
DT_QUINT16 = 16
DT_UINT16 = 17
DT_COMPLEX128 = 18
DT_HALF = 19
DT_UINT32 = 22
DT_UINT64 = 23

# The numpy dtypes reverie writes, and their DataType.
_NUMPY_TO_DT = {
    np.dtype(np.float16): DT_HALF,
    np.dtype(np.float32): DT_FLOAT,
    np.dtype(np.float64): DT_DOUBLE,
    np.dtype(np.int8): DT_INT8,
    np.dtype(np.int16): DT_INT16,
    np.dtype(np.int32): DT_INT32,
    np.dtype(np.int64): DT_INT64,
    np.dtype(np.uint8): DT_UINT8,
    np.dtype(np.uint16): DT_UINT16,
    np.dtype(np.uint32): DT_UINT32,
    np.dtype(np.uint64): DT_UINT64,
    np.dtype(np.bool_): DT_BOOL,
    np.dtype(np.complex64): DT_COMPLEX64,
    np.dtype(np.complex128): DT_COMPLEX128,
}

# DataType -> little-endian numpy dtype of the decoded array. The quantized
# types decode to their storage integers.
_DT_TO_NUMPY = {dt: np.dtype(t).newbyteorder('<')
                for t, dt in _NUMPY_TO_DT.items()}
_DT_TO_NUMPY.update({
    DT_QINT8: np.dtype('<i1'),
    DT_QUINT8: np.dtype('<u1'),
    DT_QINT16: np.dtype('<i2'),
    DT_QUINT16: np.dtype('<u2'),
    DT_QINT32: np.dtype('<i4'),
})

DELTA_DTYPES = frozenset(
    [DT_INT8, DT_INT16, DT_INT32, DT_INT64, DT_UINT8, DT_UINT16, DT_UINT32,
     DT_UINT64])

# TensorFlow's Tensor::TotalBytes counts this many bytes per DT_STRING
# element (sizeof(tstring)); Reverb reports TotalBytes as
# ChunkData.data_uncompressed_size.
STRING_ELEMENT_OVERHEAD = 24

_MAX_STRING_ELEMENT = (1 << 32) - 1
_MAX_SNAPPY_INPUT = (1 << 32) - 1
# The densest Snappy element (a 3-byte copy emitting 64 bytes) expands
# 21.3 times; content claiming more is rejected before allocating.
_MAX_SNAPPY_RATIO = 22

_Dim = tensor_shape_pb2.TensorShapeProto.Dim
_TensorShapeProto = tensor_shape_pb2.TensorShapeProto
_TensorProto = tensor_pb2.TensorProto


def _bfloat16_dtype():
  """numpy's bfloat16 (from ml_dtypes, imported only when needed)."""
  try:
    import ml_dtypes  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return np.dtype(ml_dtypes.bfloat16)


_dtype_enums = {}  # np.dtype -> DataType, for the dtypes seen


def dtype_enum(dtype):
  """The TensorFlow DataType value for a numpy dtype."""
  dt = _dtype_enums.get(dtype) if isinstance(dtype, np.dtype) else None
  if dt is None:
    dt = _dtype_enum(dtype)
    if isinstance(dtype, np.dtype):
      _dtype_enums[dtype] = dt
  return dt


def _dtype_enum(dtype):
  dtype = np.dtype(dtype)
  if dtype.kind in 'SUO':
    return DT_STRING
  if dtype.byteorder in '<>':
    dtype = dtype.newbyteorder('=')
  dt = _NUMPY_TO_DT.get(dtype)
  if dt is not None:
    return dt
  if dtype.name == 'bfloat16':
    return DT_BFLOAT16
  raise errors.InvalidArgumentError(f'unsupported dtype {dtype}')


def native_dtype(dtype):
  """``dtype`` in the machine's byte order: two dtypes that differ only in
  byte order encode to the same DataType (tensors go on the wire
  little-endian), so they are compared in this form."""
  dtype = np.dtype(dtype)
  if dtype.byteorder in '<>':
    dtype = dtype.newbyteorder('=')
  return dtype


def numpy_dtype(dt):
  """The numpy dtype reverie decodes DataType ``dt`` to."""
  if dt == DT_STRING:
    return np.dtype(object)
  d = _DT_TO_NUMPY.get(dt)
  if d is not None:
    return d
  if dt == DT_BFLOAT16:
    b = _bfloat16_dtype()
    if b is not None:
      return b
    raise errors.InvalidArgumentError(
        'DT_BFLOAT16 tensors need the ml_dtypes package')
  raise errors.InvalidArgumentError(f'unsupported tensor dtype {dt}')


def as_array(value):
  """``value`` as a numpy array, as a writer stores a step's leaf.

  Python str and bytes become 0-d object arrays (so trailing NUL bytes
  survive, which numpy's fixed-width 'S' type would drop); everything else
  goes through ``np.asarray``. Python ints become int64, floats float64.
  """
  if isinstance(value, np.ndarray):
    return value
  if isinstance(value, (bytes, str)):
    a = np.empty((), dtype=object)
    a[()] = value
    return a
  return np.asarray(value)


# --- strings -------------------------------------------------------------


def _varints(lengths):
  """The varint encodings of non-negative int64 ``lengths``, concatenated."""
  if lengths.size == 0:
    return b''
  if int(lengths.max()) < 0x80:
    return lengths.astype(np.uint8).tobytes()
  l = lengths.astype(np.uint64)
  nbytes = np.ones(l.shape, np.int64)
  for k in range(1, 5):
    nbytes += l >= (np.uint64(1) << np.uint64(7 * k))
  starts = np.cumsum(nbytes) - nbytes
  out = np.empty(int(nbytes.sum()), np.uint8)
  for k in range(5):
    sel = nbytes > k
    if not sel.any():
      break
    v = (l[sel] >> np.uint64(7 * k)) & np.uint64(0x7f)
    more = nbytes[sel] > k + 1
    out[starts[sel] + k] = v.astype(np.uint8) | (more.astype(np.uint8) << 7)
  return out.tobytes()


def _as_bytes(x):
  if isinstance(x, bytes):
    return x
  if isinstance(x, str):
    return x.encode('utf-8')
  if isinstance(x, (bytearray, memoryview, np.bytes_)):
    return bytes(x)
  raise errors.InvalidArgumentError(
      f'string tensor element of type {type(x).__name__} is neither bytes '
      'nor str')


_STRING_TYPES = (bytes, str, bytearray, memoryview)


def check_string_elements(arr):
  """Raises InvalidArgumentError unless every element of object array
  ``arr`` is one that encode_strings takes (bytes, str, bytearray or
  memoryview). Arrays of other kinds pass unchecked."""
  if arr.dtype.kind != 'O':
    return
  for t in set(map(type, arr.reshape(-1).tolist())):
    if not issubclass(t, _STRING_TYPES):
      raise errors.InvalidArgumentError(
          f'string tensor element of type {t.__name__} is neither bytes '
          'nor str')


def _string_elements(arr):
  """(lengths int64 array, concatenated bytes) of a string-like array."""
  flat = arr.reshape(-1)
  n = flat.size
  if n == 0:
    return np.zeros(0, np.int64), b''
  if flat.dtype.kind == 'U':
    flat = np.char.encode(flat, 'utf-8')
  if flat.dtype.kind == 'S':
    width = flat.dtype.itemsize
    lengths = np.char.str_len(flat).astype(np.int64)
    if width == 0:
      return lengths, b''
    mat = np.frombuffer(flat.tobytes(), np.uint8)
    mat = mat.reshape(n, width)
    mask = np.arange(width) < lengths[:, None]
    return lengths, mat[mask].tobytes()
  # Object arrays: bytes (the common case), str, or a mix.
  items = flat.tolist()
  try:
    data = b''.join(items)
  except TypeError:
    try:
      items = list(map(str.encode, items))
    except TypeError:
      items = list(map(_as_bytes, items))
    data = b''.join(items)
  lengths = np.fromiter(map(len, items), dtype=np.int64, count=n)
  return lengths, data


def encode_strings(arr):
  """The DT_STRING tensor_content of ``arr`` (kind S, U or O)."""
  lengths, data = _string_elements(arr)
  if lengths.size and int(lengths.max()) > _MAX_STRING_ELEMENT:
    raise errors.InvalidArgumentError(
        'string tensor element of 4 GiB or more cannot be encoded')
  return _varints(lengths) + data


def decode_strings(content, shape):
  """An object array of bytes from DT_STRING tensor_content."""
  n = math.prod(shape)  # exact: a hostile shape must not wrap around
  if n == 0:
    return np.empty(shape, dtype=object)
  buf = np.frombuffer(content, np.uint8)
  # Checked before anything is allocated for the elements.
  if n > buf.size:
    raise errors.MalformedSampleError(
        f'DT_STRING content of {buf.size} bytes cannot hold {n} elements')
  out = np.empty(n, dtype=object)
  head = buf[:n]
  if int(head.max()) < 0x80:
    lengths = head.astype(np.int64)
    header = n
  else:
    prefix = buf[:5 * n]
    ends = np.flatnonzero(prefix < 0x80)[:n]
    if ends.size < n:
      raise errors.MalformedSampleError(
          'DT_STRING content: truncated element lengths')
    starts = np.empty(n, np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    nbytes = ends - starts + 1
    if int(nbytes.max()) > 5:
      raise errors.MalformedSampleError(
          'DT_STRING content: element length varint longer than 5 bytes')
    lengths = np.zeros(n, np.int64)
    for k in range(5):
      sel = nbytes > k
      if not sel.any():
        break
      lengths[sel] |= (prefix[starts[sel] + k].astype(np.int64) & 0x7f) << (
          7 * k)
    header = int(ends[-1]) + 1
  if int(lengths.sum()) != len(content) - header:
    raise errors.MalformedSampleError(
        f'DT_STRING content: element lengths sum to {int(lengths.sum())} '
        f'bytes, {len(content) - header} bytes follow')
  ends = np.cumsum(lengths) + header
  starts = ends - lengths
  content = bytes(content)
  out[:] = list(
      map(content.__getitem__, map(slice, starts.tolist(), ends.tolist())))
  return out.reshape(shape)


# --- tensors -------------------------------------------------------------


def _shape_proto(shape):
  return _TensorShapeProto(dim=[_Dim(size=d) for d in shape])


def _little_endian(arr):
  if arr.dtype.byteorder == '>':
    arr = arr.astype(arr.dtype.newbyteorder('<'))
  if not arr.flags.c_contiguous:
    arr = arr.copy(order='C')  # (np.ascontiguousarray makes 0-d arrays 1-d)
  return arr


def _unsigned(dtype):
  return np.dtype(f'<u{dtype.itemsize}')


def delta_encode(arr):
  """Row differences of an integer array of rank >= 2 (a new array)."""
  if arr.size == 0:
    return arr.copy()
  u = arr.view(_unsigned(arr.dtype)).reshape(arr.shape[0], -1)
  out = np.empty_like(u)
  if u.shape[0]:
    out[0] = u[0]
    np.subtract(u[1:], u[:-1], out=out[1:])
  return out.view(arr.dtype).reshape(arr.shape)


def delta_decode(arr):
  """Inverts delta_encode (a new array)."""
  if arr.size == 0:
    return arr.copy()
  udt = _unsigned(arr.dtype)
  u = arr.view(udt).reshape(arr.shape[0], -1)
  out = np.cumsum(u, axis=0, dtype=udt)
  return out.view(arr.dtype).reshape(arr.shape)


# Blocks of up to this many bytes are written as one Snappy literal.
_LITERAL_MAX = 60


def compress(arr):
  """Snappy block of the little-endian bytes of ``arr``.

  Up to _LITERAL_MAX bytes (a scalar reward, an action) the block is one
  literal, made here: its length, a one-byte tag, the bytes. Snappy
  itself writes only literals below 17 bytes, so up to there the bytes
  are the same; above, a compressible input gives up to 55 bytes more.
  cramjam releases the GIL for every call, and each release hands a busy
  Python thread of the caller's process its 5 ms turn (see
  docs/benchmarks-notes.md, "The Python client beside other Python
  threads").
  """
  arr = _little_endian(arr)
  n = arr.nbytes
  if n <= _LITERAL_MAX:
    if not n:
      return b'\x00'
    return bytes((n, (n - 1) << 2)) + arr.tobytes()
  if n > _MAX_SNAPPY_INPUT:
    raise errors.InvalidArgumentError(
        f'tensor of {n} bytes is too large for Snappy')
  if arr.ndim:
    # Snappy reads the array's memory as it is (it is C-contiguous), which
    # saves making a flat byte view of it first: a tenth of the cost of a
    # small step.
    try:
      return bytes(_snappy.compress_raw(arr))
    except (TypeError, BufferError, ValueError):
      pass  # a dtype the buffer protocol does not export (bfloat16)
  return bytes(_snappy.compress_raw(arr.reshape(-1).view(np.uint8)))


def encode_tensor(arr, delta=False):
  """The TensorProto of numpy array ``arr``.

  ``delta`` is the chunk's delta_encoded flag; it only changes integer
  tensors of rank >= 2.
  """
  dt, shape, content = tensor_content(as_array(arr), delta)
  return _TensorProto(
      dtype=dt, tensor_shape=_shape_proto(shape), tensor_content=content)


def tensor_content(arr, delta=False):
  """(DataType, shape, tensor_content) of numpy array ``arr``, as
  encode_tensor writes them."""
  dt = dtype_enum(arr.dtype)
  if dt == DT_STRING:
    return dt, arr.shape, encode_strings(arr)
  arr = _little_endian(arr)
  if delta and arr.ndim >= 2 and dt in DELTA_DTYPES:
    arr = delta_encode(arr)
  return dt, arr.shape, compress(arr)


def encodes_without_error(arr):
  """Whether tensor_content(arr) cannot fail: a numeric array that Snappy
  takes (strings are checked element by element as they are encoded)."""
  return arr.dtype.kind not in 'SUO' and arr.nbytes <= _MAX_SNAPPY_INPUT


def tensor_shape(proto):
  """The shape of a TensorProto as a tuple of ints."""
  sp = proto.tensor_shape
  if sp.unknown_rank:
    raise errors.MalformedSampleError('tensor shape has unknown rank')
  shape = tuple(d.size for d in sp.dim)
  for i, d in enumerate(shape):
    if d < 0:
      raise errors.MalformedSampleError(
          f'dimension {i} of tensor shape {shape} is negative or unknown')
  return shape


def decompressed_len(content):
  """The length a Snappy block header announces."""
  try:
    return _snappy.decompress_raw_len(content)
  except Exception as e:  # pylint: disable=broad-except
    raise errors.MalformedSampleError(f'corrupt Snappy header: {e}') from e


def decompress_raw_into(content, out):
  """Decompresses a Snappy block into the writable contiguous buffer
  ``out``; returns the number of bytes written (at most len(out)). Raises
  if the block does not fit or is corrupt."""
  return _snappy.decompress_raw_into(content, out)


def decompress_into(content, out):
  """Decompresses a Snappy block into the contiguous array ``out``, whose
  size must be what the block announces."""
  want = out.nbytes
  got = decompressed_len(content)
  if got != want:
    raise errors.MalformedSampleError(
        f'Snappy content decompresses to {got} bytes, want {want}')
  if want > len(content) * _MAX_SNAPPY_RATIO:
    raise errors.MalformedSampleError(
        f'Snappy content of {len(content)} bytes cannot expand to {want}')
  if want == 0:
    return out
  try:
    _snappy.decompress_raw_into(content, out.reshape(-1).view(np.uint8))
  except Exception as e:  # pylint: disable=broad-except
    raise errors.MalformedSampleError(f'corrupt Snappy content: {e}') from e
  return out


# TensorFlow's typed value fields, used when tensor_content is empty.
_TYPED_FIELDS = {
    DT_FLOAT: 'float_val',
    DT_DOUBLE: 'double_val',
    DT_INT32: 'int_val',
    DT_INT16: 'int_val',
    DT_INT8: 'int_val',
    DT_UINT8: 'int_val',
    DT_UINT16: 'int_val',
    DT_QINT8: 'int_val',
    DT_QUINT8: 'int_val',
    DT_QINT16: 'int_val',
    DT_QUINT16: 'int_val',
    DT_QINT32: 'int_val',
    DT_INT64: 'int64_val',
    DT_BOOL: 'bool_val',
    DT_HALF: 'half_val',
    DT_BFLOAT16: 'half_val',
    DT_COMPLEX64: 'scomplex_val',
    DT_COMPLEX128: 'dcomplex_val',
    DT_UINT32: 'uint32_val',
    DT_UINT64: 'uint64_val',
}
_MAX_FILL = 1 << 20


def _from_typed_values(proto, dt, dtype, shape, n):
  """TensorFlow's rules: extra values are ignored, missing ones repeat the
  last, none at all means zeros."""
  if dt == DT_STRING:
    vals = list(proto.string_val)
    if not vals:
      vals = [b'']
  else:
    field = _TYPED_FIELDS.get(dt)
    raw = np.asarray(getattr(proto, field) if field else [])
    if dt in (DT_COMPLEX64, DT_COMPLEX128):
      raw = raw[:raw.size // 2 * 2]
      raw = raw[0::2] + 1j * raw[1::2] if raw.size else raw
    if dt in (DT_HALF, DT_BFLOAT16):
      vals = raw.astype(np.uint16).view(dtype)
    else:
      vals = raw.astype(dtype) if raw.size else np.zeros(1, dtype)
  if len(vals) < n and n > _MAX_FILL:
    raise errors.MalformedSampleError(
        f'{len(vals)} typed values cannot fill {n} elements')
  if dt == DT_STRING:
    out = np.empty(n, dtype=object)
    k = min(len(vals), n)
    out[:k] = vals[:k]
    if k < n:
      out[k:] = vals[-1]
    return out.reshape(shape)
  if len(vals) == 0:
    return np.zeros(shape, dtype)
  idx = np.minimum(np.arange(n), len(vals) - 1)
  return np.asarray(vals)[idx].astype(dtype).reshape(shape)


def decode_tensor(proto, delta=False):
  """The numpy array of a TensorProto written by a Reverb client.

  ``delta`` is the chunk's delta_encoded flag. The result owns its memory
  (it does not alias ``proto``).
  """
  dt = proto.dtype
  dtype = numpy_dtype(dt)
  shape = tensor_shape(proto)
  n = 1
  for d in shape:
    n *= d
  content = proto.tensor_content
  if dt == DT_STRING:
    if n and not content:
      return _from_typed_values(proto, dt, dtype, shape, n)
    return decode_strings(content, shape)
  if n == 0:
    return np.zeros(shape, dtype)
  if content:
    # Checked before the array is allocated, so that a hostile shape
    # cannot ask for terabytes.
    if n * dtype.itemsize > len(content) * _MAX_SNAPPY_RATIO:
      raise errors.MalformedSampleError(
          f'Snappy content of {len(content)} bytes cannot expand to {n} '
          f'elements of {dtype}')
    out = decompress_into(content, np.empty(shape, dtype))
  else:
    out = _from_typed_values(proto, dt, dtype, shape, n)
  if delta and len(shape) >= 2 and dt in DELTA_DTYPES:
    out = delta_decode(out)
  return out


def decode_plain_tensor(proto):
  """The numpy array of a TensorProto as TensorFlow writes it (the bounds
  of a BoundedTensorSpec in a signature): tensor_content holds the raw
  little-endian values, not Snappy as in a chunk, or the typed fields
  hold them."""
  dt = proto.dtype
  dtype = numpy_dtype(dt)
  shape = tensor_shape(proto)
  n = math.prod(shape)
  content = proto.tensor_content
  if dt == DT_STRING or not content:
    return _from_typed_values(proto, dt, dtype, shape, n)
  if len(content) != n * dtype.itemsize:
    raise errors.MalformedSampleError(
        f'tensor_content of {len(content)} bytes for {n} elements of '
        f'{dtype}')
  return np.frombuffer(content, dtype.newbyteorder('<')).astype(
      dtype).reshape(shape)


def total_bytes(arr):
  """TensorFlow's TotalBytes for ``arr`` (data_uncompressed_size)."""
  if arr.dtype.kind in 'SUO':
    lengths, _ = _string_elements(arr)
    return int(lengths.sum()) + STRING_ELEMENT_OVERHEAD * arr.size
  return arr.nbytes


def encode_chunk(key, sequence_range, columns, delta=False):
  """A ChunkData holding ``columns`` (arrays of equal leading dimension).

  ``sequence_range`` is a SequenceRange message or a tuple
  (episode_id, start, end, sparse).
  """
  if not columns:
    raise errors.InvalidArgumentError('a chunk needs at least one column')
  tensors = []
  size = 0
  rows = None
  for i, col in enumerate(columns):
    col = as_array(col)
    if col.ndim == 0:
      raise errors.InvalidArgumentError(
          f'chunk column {i} is a scalar; columns are batched [T, ...]')
    if rows is None:
      rows = col.shape[0]
    elif col.shape[0] != rows:
      raise errors.InvalidArgumentError(
          f'chunk column {i} has {col.shape[0]} rows, column 0 has {rows}')
    tensors.append(encode_tensor(col, delta))
    size += total_bytes(col)
  if not isinstance(sequence_range, schema_pb2.SequenceRange):
    episode_id, start, end, sparse = sequence_range
    sequence_range = schema_pb2.SequenceRange(
        episode_id=episode_id, start=start, end=end, sparse=sparse)
  return schema_pb2.ChunkData(
      chunk_key=key,
      sequence_range=sequence_range,
      delta_encoded=delta,
      data=schema_pb2.ChunkData.Data(tensors=tensors),
      data_tensors_len=len(tensors),
      data_uncompressed_size=size)


def chunk_tensors(chunk):
  """The TensorProtos of a chunk (data, or deprecated_data of old ones)."""
  tensors = chunk.data.tensors
  if not len(tensors):  # pylint: disable=g-explicit-length-test
    tensors = chunk.deprecated_data
  return tensors


def decode_chunk(chunk):
  """Every tensor of a ChunkData, decoded, in order."""
  delta = chunk.delta_encoded
  try:
    return [decode_tensor(t, delta) for t in chunk_tensors(chunk)]
  except errors.ReverieError as e:
    raise errors.MalformedSampleError(
        f'chunk {chunk.chunk_key}: {e}') from e


def stack_rows(rows):
  """Stacks step values (arrays of equal dtype and shape) into [T, ...]."""
  if len(rows) == 1:
    return rows[0][np.newaxis]
  return np.stack(rows)

