"""Chunk encoding: golden vectors shared with the Go client, every dtype,
delta encoding, strings, the writer's hand-built wire bytes, and imports.
No server needed."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import reverie
from reverie import _channel as channel_lib
from reverie import _keys
from reverie import _tree
from reverie import _wire
from reverie import dataset
from reverie import encoding
from reverie import sampler
from reverie import specs
from reverie._proto.deepmind.reverb import reverb_service_pb2
from reverie._proto.deepmind.reverb import schema_pb2
from reverie._proto.tensorflow import struct_pb2
from reverie._proto.tensorflow import tensor_pb2


def unhex(s):
  return bytes.fromhex(s.replace(' ', ''))


# The golden vectors of client/encoding_test.go (derived by hand there):
# (array, delta, tensor_content, whole TensorProto wire bytes).
GOLDENS = [
    ('float32[2]', np.array([1, -2.5], np.float32), False,
     '08 1c 0000803f 000020c0',
     '08 01 12 04 12 02 08 02 22 0a 08 1c 0000803f 000020c0'),
    ('int32[3,2] delta', np.array([[1, 2], [4, 8], [2, 16]], np.int32), True,
     '18 5c 01000000 02000000 03000000 06000000 feffffff 08000000',
     '08 03 12 08 12 02 08 03 12 02 08 02 '
     '22 1a 18 5c 01000000 02000000 03000000 06000000 feffffff 08000000'),
    ('uint8[2,2] delta wrap', np.array([[250, 0], [3, 255]], np.uint8), True,
     '04 0c fa 00 09 ff',
     '08 04 12 08 12 02 08 02 12 02 08 02 22 06 04 0c fa 00 09 ff'),
    ('int8[2,1] delta', np.array([[100], [-100]], np.int8), True,
     '02 04 64 38', '08 06 12 08 12 02 08 02 12 02 08 01 22 04 02 04 64 38'),
    ('bool[3]', np.array([True, False, True]), True, '03 08 01 00 01',
     '08 0a 12 04 12 02 08 03 22 05 03 08 01 00 01'),
    ('string[2]', np.array([b'ab', b''], dtype=object), False, '02 00 61 62',
     '08 07 12 04 12 02 08 02 22 04 02 00 61 62'),
    ('int64[3] rank1 no delta',
     np.array([0x0807060504030201, 0x1817161514131211, 0x2827262524232221],
              np.int64), True,
     '18 5c 0102030405060708 1112131415161718 2122232425262728',
     '08 09 12 04 12 02 08 03 '
     '22 1a 18 5c 0102030405060708 1112131415161718 2122232425262728'),
    ('int32 scalar', np.array(7, np.int32), False, '04 0c 07000000',
     '08 03 12 00 22 06 04 0c 07000000'),
    ('float32[0,3] empty', np.zeros((0, 3), np.float32), False, '00',
     '08 01 12 06 12 00 12 02 08 03 22 01 00'),
    ('string[0] empty', np.zeros((0,), dtype=object), False, '',
     '08 07 12 02 12 00'),
]


@pytest.mark.parametrize('name,arr,delta,content,wire', GOLDENS,
                         ids=[g[0] for g in GOLDENS])
def test_golden_vectors(name, arr, delta, content, wire):
  del name
  p = encoding.encode_tensor(arr, delta)
  assert p.tensor_content == unhex(content)
  assert p.SerializeToString(deterministic=True) == unhex(wire)
  back = encoding.decode_tensor(tensor_pb2.TensorProto.FromString(unhex(wire)),
                                delta)
  assert back.shape == arr.shape
  assert back.dtype == arr.dtype
  np.testing.assert_array_equal(back, arr)


def test_small_blocks_are_one_literal():
  # Up to 60 bytes compress() writes the block itself (cramjam would
  # release the GIL); Snappy writes only literals below 17 bytes, so up to
  # there the bytes are Snappy's own, and every block decompresses.
  rng = np.random.default_rng(3)
  snappy = encoding._snappy  # pylint: disable=protected-access
  for n in range(0, 70):
    for arr in (rng.integers(0, 256, n, dtype=np.uint8), np.zeros(n, np.uint8),
                rng.random(n // 4, dtype=np.float32)):
      block = encoding.compress(arr)
      assert bytes(snappy.decompress_raw(block)) == arr.tobytes(), n
      if arr.nbytes < 17:
        assert block == bytes(snappy.compress_raw(arr.tobytes())), n
      elif arr.nbytes <= 60:
        assert len(block) == arr.nbytes + 2, n
  # Above that, Snappy compresses.
  assert len(encoding.compress(np.zeros(61, np.uint8))) < 61


def test_delta_not_applied_without_flag():
  x = np.array([[250, 0], [3, 255]], np.uint8)
  p = encoding.encode_tensor(x, False)
  assert p.tensor_content == unhex('04 0c fa 00 03 ff')
  # Decoding with the wrong flag gives the stored values "undeltaed".
  np.testing.assert_array_equal(encoding.decode_tensor(p, True),
                                [[250, 0], [253, 255]])
  encoding.encode_tensor(x, True)
  np.testing.assert_array_equal(x, [[250, 0], [3, 255]])  # input unchanged


ALL_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16,
              np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.bool_, np.complex64, np.complex128]


def _sample_array(dtype, shape, rng):
  dtype = np.dtype(dtype)
  if dtype.kind == 'b':
    return rng.integers(0, 2, shape).astype(bool)
  if dtype.kind in 'iu':
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype,
                        endpoint=True)
  if dtype.kind == 'c':
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
           ).astype(dtype)
  a = rng.standard_normal(shape).astype(dtype)
  a.reshape(-1)[:3] = [np.inf, -np.inf, np.nan][:a.size]
  return a


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize('delta', [False, True])
@pytest.mark.parametrize('shape', [(5,), (4, 3), (3, 2, 2), (0, 2), (1,)])
def test_round_trip_every_dtype(dtype, delta, shape):
  rng = np.random.default_rng(0)
  arr = _sample_array(dtype, shape, rng)
  p = encoding.encode_tensor(arr, delta)
  assert p.dtype == encoding.dtype_enum(arr.dtype)
  wire = tensor_pb2.TensorProto.FromString(p.SerializeToString())
  back = encoding.decode_tensor(wire, delta)
  assert back.dtype == arr.dtype and back.shape == arr.shape
  np.testing.assert_array_equal(back.view(np.uint8), arr.view(np.uint8))


def test_dtype_enums():
  want = {np.float16: 19, np.float32: 1, np.float64: 2, np.int8: 6,
          np.int16: 5, np.int32: 3, np.int64: 9, np.uint8: 4, np.uint16: 17,
          np.uint32: 22, np.uint64: 23, np.bool_: 10, np.complex64: 8,
          np.complex128: 18, np.object_: 7, np.bytes_: 7, np.str_: 7}
  for t, dt in want.items():
    assert encoding.dtype_enum(t) == dt, t
  assert encoding.dtype_enum(np.dtype('>f4')) == 1
  with pytest.raises(reverie.InvalidArgumentError):
    encoding.dtype_enum(np.dtype('datetime64[s]'))


def test_big_endian_input_is_written_little_endian():
  arr = np.array([1, 2, 3], dtype='>i4')
  p = encoding.encode_tensor(arr)
  back = encoding.decode_tensor(p)
  np.testing.assert_array_equal(back, [1, 2, 3])
  assert encoding.encode_tensor(arr.astype('<i4')).tensor_content == (
      p.tensor_content)


def test_non_contiguous_input():
  arr = np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::2]
  back = encoding.decode_tensor(encoding.encode_tensor(arr, True), True)
  np.testing.assert_array_equal(back, arr)


@pytest.mark.parametrize('dtype', [np.int16, np.uint16, np.int32, np.uint32,
                                   np.int64, np.uint64])
def test_delta_wrap_around(dtype):
  info = np.iinfo(dtype)
  arr = np.array([[info.max, info.min], [info.min, info.max],
                  [0, info.max]], dtype)
  p = encoding.encode_tensor(arr, True)
  np.testing.assert_array_equal(encoding.decode_tensor(p, True), arr)
  # Rows are differences in the unsigned type: row 1 - row 0.
  raw = np.frombuffer(
      encoding._snappy.decompress_raw(p.tensor_content), arr.dtype)  # pylint: disable=protected-access
  u = arr.view(f'u{arr.itemsize}').astype(object)
  mod = 1 << (8 * arr.itemsize)
  want = [(u[1, j] - u[0, j]) % mod for j in range(2)]
  assert list(raw.view(f'u{arr.itemsize}')[2:4]) == want


def test_strings_object_bytes_str_and_nul():
  arr = np.array([[b'a\x00', b''], ['h\xe9llo', b'\x00\x00']], dtype=object)
  p = encoding.encode_tensor(arr)
  assert p.dtype == encoding.DT_STRING
  back = encoding.decode_tensor(p)
  assert back.dtype == object and back.shape == (2, 2)
  assert back.tolist() == [[b'a\x00', b''], ['h\xe9llo'.encode(), b'\x00\x00']]


def test_strings_fixed_width_and_unicode_arrays():
  s = np.array([b'abc', b'', b'de'])
  assert encoding.encode_strings(s) == b'\x03\x00\x02abcde'
  u = np.array(['é', 'xyz'])
  assert encoding.encode_strings(u) == b'\x02\x03' + 'é'.encode() + b'xyz'
  assert encoding.decode_tensor(encoding.encode_tensor(u)).tolist() == [
      'é'.encode(), b'xyz']


@pytest.mark.parametrize('length', [0, 1, 127, 128, 300, 16383, 16384,
                                    70000, 2_100_000])
def test_string_varint_lengths(length):
  # Each length takes 1, 2 or 3+ varint bytes; mixed with short strings so
  # that the vectorised parser meets several widths in one tensor.
  arr = np.array([b'x' * length, b'ab', b'y' * (length // 2)], dtype=object)
  content = encoding.encode_strings(arr)
  header = _wire.varint(length) + b'\x02' + _wire.varint(length // 2)
  assert content[:len(header)] == header
  back = encoding.decode_strings(content, (3,))
  assert back.tolist() == arr.tolist()


def test_many_strings_vectorised():
  n = 200_000
  lengths = np.arange(n) % 300
  arr = np.empty(n, dtype=object)
  arr[:] = [b'z' * int(k) for k in lengths]
  content = encoding.encode_strings(arr)
  back = encoding.decode_strings(content, (n,))
  assert back[299] == b'z' * 299 and back[300] == b'' and back.size == n


def test_malformed_content():
  p = encoding.encode_tensor(np.arange(4, dtype=np.float32))
  p.tensor_shape.dim[0].size = 5
  with pytest.raises(reverie.MalformedSampleError, match='decompresses to'):
    encoding.decode_tensor(p)
  bad = tensor_pb2.TensorProto(dtype=encoding.DT_STRING,
                               tensor_content=b'\x05ab')
  bad.tensor_shape.dim.add(size=1)
  with pytest.raises(reverie.MalformedSampleError, match='lengths sum'):
    encoding.decode_tensor(bad)
  bad.tensor_content = b'\x80\x80'
  bad.tensor_shape.dim[0].size = 2
  with pytest.raises(reverie.MalformedSampleError, match='truncated'):
    encoding.decode_tensor(bad)
  neg = tensor_pb2.TensorProto(dtype=encoding.DT_FLOAT)
  neg.tensor_shape.dim.add(size=-1)
  with pytest.raises(reverie.MalformedSampleError):
    encoding.decode_tensor(neg)


def test_hostile_shapes_fail_before_allocating():
  # Shapes far larger than the content could hold are refused before an
  # array of that size is allocated (and a product that wraps around in
  # 64 bits is not taken for a small one).
  huge = tensor_pb2.TensorProto(dtype=encoding.DT_FLOAT, tensor_content=b'\x00')
  huge.tensor_shape.dim.add(size=1 << 62)
  huge.tensor_shape.dim.add(size=4)
  with pytest.raises(reverie.MalformedSampleError, match='cannot expand'):
    encoding.decode_tensor(huge)
  wrap = tensor_pb2.TensorProto(dtype=encoding.DT_STRING, tensor_content=b'\x00')
  wrap.tensor_shape.dim.add(size=1 << 32)
  wrap.tensor_shape.dim.add(size=1 << 32)
  with pytest.raises(reverie.MalformedSampleError, match='cannot hold'):
    encoding.decode_tensor(wrap)
  many = tensor_pb2.TensorProto(dtype=encoding.DT_STRING, tensor_content=b'\x00')
  many.tensor_shape.dim.add(size=1 << 40)
  with pytest.raises(reverie.MalformedSampleError, match='cannot hold'):
    encoding.decode_tensor(many)


def test_bounded_spec_bounds_as_tensorflow_writes_them():
  # tf.make_tensor_proto puts the raw values in tensor_content (not Snappy,
  # as in chunks); a bound that does not decode is left out rather than
  # failing the whole signature.
  spec = struct_pb2.StructuredValue()
  b = spec.bounded_tensor_spec_value
  b.dtype = encoding.DT_FLOAT
  b.shape.dim.add(size=2)
  b.minimum.dtype = encoding.DT_FLOAT
  b.minimum.tensor_shape.dim.add(size=2)
  b.minimum.tensor_content = np.array([-1, -2], '<f4').tobytes()
  b.maximum.dtype = encoding.DT_FLOAT
  b.maximum.float_val.append(3.0)  # a scalar bound in a typed field
  got = specs.decode(spec)
  np.testing.assert_array_equal(got.minimum, [-1, -2])
  assert got.minimum.dtype == np.float32
  np.testing.assert_array_equal(got.maximum, 3.0)
  b.minimum.tensor_content = b'\x01\x02\x03'  # not 8 bytes
  assert specs.decode(spec).minimum is None


def test_named_tuple_with_invalid_names_keeps_its_order():
  # Field names that are not identifiers must not turn the named tuple
  # into a dict (flattened by sorted key: columns under the wrong names).
  sv = struct_pb2.StructuredValue()
  nt = sv.named_tuple_value
  nt.name = 'my.Step'
  for key, dt in (('z', encoding.DT_FLOAT), ('1a', encoding.DT_INT32),
                  ('a', encoding.DT_INT64)):
    p = nt.values.add(key=key)
    p.value.tensor_spec_value.dtype = dt
  got = specs.decode(sv)
  assert isinstance(got, tuple)
  assert [s.dtype for s in got] == [np.float32, np.int32, np.int64]
  assert got._fields == ('z', '_1', 'a')


def test_slices_of_different_dtypes_are_malformed():
  a = encoding.encode_chunk(1, (7, 0, 0, False), [np.array([1], np.int64)])
  b = encoding.encode_chunk(2, (7, 1, 1, False), [np.array([2], np.uint64)])
  info = schema_pb2.SampleInfo(probability=1.0, table_size=1)
  info.item.key, info.item.table = 9, 't'
  col = info.item.flat_trajectory.columns.add()
  col.chunk_slices.add(chunk_key=1, offset=0, length=1, index=0)
  col.chunk_slices.add(chunk_key=2, offset=0, length=1, index=0)
  with pytest.raises(reverie.MalformedSampleError, match='differ in dtype'):
    sampler.decode_sample(info, [a, b])


def _raw_sample(key, chunk_key, value):
  """A raw sample (SampleInfo, [ChunkData]) of one int64 step; chunk_key
  None leaves its chunk out (a malformed sample)."""
  info = schema_pb2.SampleInfo(probability=1.0, table_size=1)
  info.item.key, info.item.table = key, 't'
  col = info.item.flat_trajectory.columns.add(squeeze=True)
  col.chunk_slices.add(chunk_key=key, offset=0, length=1, index=0)
  chunks = []
  if chunk_key is not None:
    chunks.append(encoding.encode_chunk(chunk_key, (7, 0, 0, False),
                                        [np.array([value], np.int64)]))
  return info, chunks


def test_sinks_deliver_the_samples_before_a_bad_one():
  good, bad = _raw_sample(1, 1, 10), _raw_sample(2, None, 0)
  q = sampler._SampleQueue(4)  # pylint: disable=protected-access
  with pytest.raises(reverie.MalformedSampleError):
    q.put([good, bad])
  (got,) = q.channel.get(timeout=1)
  assert int(got[1][0]) == 10
  out = channel_lib.Channel(4)
  b = dataset._Batcher(1, out, False, lambda a: a)  # pylint: disable=protected-access
  with pytest.raises(reverie.MalformedSampleError):
    b.put([good, bad])
  assert int(out.get(timeout=1).data[0][0]) == 10


def test_typed_values_when_no_content():
  p = tensor_pb2.TensorProto(dtype=encoding.DT_FLOAT, float_val=[1.5, 2.5])
  p.tensor_shape.dim.add(size=4)
  np.testing.assert_array_equal(encoding.decode_tensor(p), [1.5, 2.5, 2.5, 2.5])
  p = tensor_pb2.TensorProto(dtype=encoding.DT_INT32)
  p.tensor_shape.dim.add(size=3)
  np.testing.assert_array_equal(encoding.decode_tensor(p), [0, 0, 0])
  p = tensor_pb2.TensorProto(dtype=encoding.DT_STRING, string_val=[b'q'])
  p.tensor_shape.dim.add(size=2)
  assert encoding.decode_tensor(p).tolist() == [b'q', b'q']


def test_chunk_encoding():
  obs = np.array([[1, 2], [4, 8], [2, 16]], np.int32)
  reward = np.array([0.5, 1, -1], np.float32)
  names = np.array([b'ab', b'', b'c'], dtype=object)
  c = encoding.encode_chunk(7, (42, 10, 12, False), [obs, reward, names],
                            delta=True)
  assert c.chunk_key == 7 and c.delta_encoded and c.data_tensors_len == 3
  assert (c.sequence_range.episode_id, c.sequence_range.start,
          c.sequence_range.end) == (42, 10, 12)
  # 24 (int32 [3,2]) + 12 (float32 [3]) + 3 x 24 + 3 (strings) = 111.
  assert c.data_uncompressed_size == 24 + 12 + 3 * 24 + 3
  assert c.data.tensors[0].tensor_content == unhex(
      '18 5c 01000000 02000000 03000000 06000000 feffffff 08000000')
  back = encoding.decode_chunk(
      schema_pb2.ChunkData.FromString(c.SerializeToString()))
  np.testing.assert_array_equal(back[0], obs)
  np.testing.assert_array_equal(back[1], reward)
  assert back[2].tolist() == names.tolist()
  with pytest.raises(reverie.InvalidArgumentError, match='rows'):
    encoding.encode_chunk(1, (1, 0, 0, False), [obs, reward[:2]])


# Every length a varint can have, at both ends, and zero.
VARINT_VALUES = [0, 1, 2**64 - 1] + [
    v for k in range(1, 10) for v in (2**(7 * k) - 1, 2**(7 * k))]


def _protobuf_varint(v):
  # A uint64 field 1: tag byte 0x08, then the varint.
  return schema_pb2.FlatTrajectory.ChunkSlice(chunk_key=v).SerializeToString()[1:]


@pytest.mark.parametrize('v', VARINT_VALUES)
def test_varint_matches_protobuf(v):
  want = _protobuf_varint(v) if v else b'\x00'
  assert _wire.varint(v) == want
  assert _keys.varints(np.array([v], np.uint64)) == [want]


def test_new_key_varint():
  # Enough keys to cross many refills, and a count that does not depend on
  # the batch size: the bound below is sized for it.
  n = max(4000, 4 * _keys._BATCH + 3)  # pylint: disable=protected-access
  pairs = [_keys.new_key_varint() for _ in range(n)]
  for key, kv in pairs:
    assert 0 <= key < 2**64
    assert kv == _protobuf_varint(key)
  keys = [k for k, _ in pairs]
  assert len(set(keys)) == len(keys)
  # Uniform over 64 bits: the keys with the top bit set are Binomial(n, 1/2),
  # standard deviation sqrt(n)/2 (about 32 for 4,000). The band of +-5% of n
  # is 6.3 deviations wide each side: a uniform generator falls outside it
  # with odds below 1e-9. (With the 195 keys this test once drew, the band of
  # +-10% was 2.8 deviations, and it failed about one run in 200.)
  top = sum(k >> 63 for k in keys)
  assert 0.45 * n < top < 0.55 * n
  assert 0 <= _keys.new_key() < 2**64


def test_new_key_varint_from_threads():
  # Writers in threads share the pool: no key may be handed out twice, even
  # when several threads find it empty and refill it at once.
  import threading  # pylint: disable=g-import-not-at-top
  per_thread = 3 * _keys._BATCH + 7  # pylint: disable=protected-access
  got = [[] for _ in range(8)]
  start = threading.Barrier(len(got))

  def draw(out):
    start.wait()
    for _ in range(per_thread):
      out.append(_keys.new_key_varint())

  threads = [threading.Thread(target=draw, args=(out,)) for out in got]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  pairs = [p for out in got for p in out]
  assert len(pairs) == len(got) * per_thread
  assert len({k for k, _ in pairs}) == len(pairs)
  assert all(kv == _protobuf_varint(k) for k, kv in pairs)


@pytest.mark.skipif(not hasattr(os, 'fork'), reason='needs os.fork')
def test_new_key_differs_in_forked_child():
  # The child must not hand out the keys the parent drew but did not use.
  _keys.new_key()  # the pool holds unused keys now
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:
    os.close(r)
    os.write(w, b','.join(str(_keys.new_key()).encode() for _ in range(8)))
    os._exit(0)  # pylint: disable=protected-access
  os.close(w)
  with os.fdopen(r, 'rb') as f:
    child = [int(x) for x in f.read().split(b',')]
  os.waitpid(pid, 0)
  parent = [_keys.new_key() for _ in range(8)]
  assert not set(child) & set(parent)


def test_wire_insert_request_matches_protobuf():
  chunk = encoding.encode_chunk(2**64 - 1, (5, 0, 1, False),
                                [np.zeros((2, 3), np.float32)])
  v = _wire.varint
  cols = [
      _wire.column([_wire.chunk_slice(v(2**64 - 1), 1, 1),
                    _wire.chunk_slice(v(12), 0, 3, 2)], True),
      _wire.column([_wire.chunk_slice(v(99), 0, 1)], False),
  ]
  item = _wire.prioritized_item(v(2**63 + 5), _wire.table_field('tablé'),
                                0.25, cols)
  keep = [1, 300, 2**64 - 1]
  req = reverb_service_pb2.InsertStreamRequest.FromString(
      _wire.insert_request([chunk.SerializeToString()], [item], keep))
  want = reverb_service_pb2.InsertStreamRequest(
      chunks=[chunk],
      items=[schema_pb2.PrioritizedItem(
          key=2**63 + 5, table='tablé', priority=0.25,
          flat_trajectory=schema_pb2.FlatTrajectory(columns=[
              schema_pb2.FlatTrajectory.Column(chunk_slices=[
                  schema_pb2.FlatTrajectory.ChunkSlice(
                      chunk_key=2**64 - 1, offset=1, length=1),
                  schema_pb2.FlatTrajectory.ChunkSlice(
                      chunk_key=12, offset=0, length=3, index=2),
              ], squeeze=True),
              schema_pb2.FlatTrajectory.Column(chunk_slices=[
                  schema_pb2.FlatTrajectory.ChunkSlice(
                      chunk_key=99, offset=0, length=1)]),
          ]))],
      keep_chunk_keys=keep)
  assert req == want
  assert item == want.items[0].SerializeToString(deterministic=True)
  assert _wire.insert_request([], [item], []) == (
      reverb_service_pb2.InsertStreamRequest(items=[want.items[0]])
      .SerializeToString(deterministic=True))


@pytest.mark.parametrize('arr', [
    np.zeros((1, 87), np.float32), np.arange(6, dtype=np.int64).reshape(3, 2),
    np.zeros((0, 200), np.uint8), np.ones((2,), bool),
    np.array([[b'x' * 200, b'']], dtype=object), np.zeros((130, 1, 0), np.int8),
], ids=lambda a: f'{a.dtype}{list(a.shape)}')
@pytest.mark.parametrize('key,episode,start,end,sparse,delta', [
    (7, 9, 0, 0, False, False),
    (2**64 - 1, 2**63, 5, 300, True, True),
    (0, 0, 0, 1, False, True),
])
def test_wire_chunk_data_matches_protobuf(arr, key, episode, start, end,
                                          sparse, delta):
  want = encoding.encode_chunk(key, (episode, start, end, sparse), [arr],
                               delta).SerializeToString(deterministic=True)
  got = _wire.chunk_data(
      _wire.varint(key),
      _wire.sequence_range(_wire.varint(episode), start, end, sparse),
      [_wire.tensor_proto(*encoding.tensor_content(arr, delta))], delta,
      encoding.total_bytes(arr))
  assert got == want


def test_tree_flattening_matches_dm_tree_order():
  import collections  # pylint: disable=g-import-not-at-top
  Point = collections.namedtuple('Point', 'y x')
  nest = {'b': [1, (2, 3)], 'a': Point(4, {'z': 5, 'c': None}), 'c': 6}
  assert _tree.flatten(nest) == [4, None, 5, 1, 2, 3, 6]
  paths = [p for p, _ in _tree.flatten_with_path(nest)]
  assert paths == [('a', 0), ('a', 1, 'c'), ('a', 1, 'z'), ('b', 0),
                   ('b', 1, 0), ('b', 1, 1), ('c',)]
  back = _tree.unflatten_as(nest, range(7))
  assert back == {'b': [3, (4, 5)], 'a': Point(0, {'z': 2, 'c': 1}), 'c': 6}
  assert isinstance(back['a'], Point) and list(back) == ['b', 'a', 'c']


def _run_python(code):
  env = dict(os.environ)
  return subprocess.run([sys.executable, '-c', textwrap.dedent(code)],
                        capture_output=True, text=True, timeout=60, env=env)


def test_import_pulls_in_no_framework():
  r = _run_python("""
      import sys
      import reverie, reverie.frameworks, reverie.adders
      bad = [m for m in sys.modules
             if m.split('.')[0] in ('torch', 'jax', 'tensorflow', 'tree')]
      print(bad)
      """)
  assert r.returncode == 0, r.stderr
  assert r.stdout.strip() == '[]'


def test_imports_next_to_conflicting_protos():
  # TensorFlow and dm-reverb register tensorflow.TensorProto and
  # deepmind.reverb.* in protobuf's default pool; reverie's stubs use a pool
  # of their own, so importing reverie after them works.
  r = _run_python("""
      from google.protobuf import descriptor_pb2, descriptor_pool
      for name, package, message in [
          ('tensorflow/core/framework/tensor.proto', 'tensorflow',
           'TensorProto'),
          ('reverb/cc/schema.proto', 'deepmind.reverb', 'ChunkData')]:
        f = descriptor_pb2.FileDescriptorProto(name=name, package=package)
        f.message_type.add(name=message)
        descriptor_pool.Default().Add(f)
      import numpy as np
      import reverie
      from reverie import encoding
      p = encoding.encode_tensor(np.arange(3, dtype=np.float32))
      print(encoding.decode_tensor(p).tolist())
      """)
  assert r.returncode == 0, r.stderr
  assert r.stdout.strip() == '[0.0, 1.0, 2.0]'
