"""Datasets: iterators of batched numpy samples, prefetched in the
background (the TrajectoryDataset + batch of dm-reverb, without TF)."""

import logging
import threading
from typing import Any, Optional

import numpy as np

from reverie import _channel
from reverie import encoding
from reverie import errors
from reverie import sampler as sampler_lib

log = logging.getLogger('reverie')

_SIGNATURE_TIMEOUT_S = 30.0


class Dataset:
  """Batches of samples of one table; ``client.dataset(table, batch_size)``.

  Iterating a Dataset starts a new :class:`DatasetIterator` (its own
  sampler and background threads), like iterating a ``tf.data.Dataset``.
  Each element is a :class:`reverie.ReplaySample` whose ``info`` fields are
  arrays of shape [batch_size] and whose ``data`` is a nest of numpy arrays
  of shape [batch_size, *column shape]: the table signature's structure
  (dicts, lists, tuples, namedtuples) when it has one, else the flat list
  of columns. All samples of a batch must have columns of equal shapes.

  Iteration ends cleanly (StopIteration) when the rate limiter timeout
  passes with no sample (``rate_limiter_timeout_ms``) or after
  ``max_samples`` samples; a last, smaller batch holds the samples gathered
  before that unless ``drop_remainder``. Other errors (unknown table, ...)
  are raised from ``next``.

  Args:
    client: the :class:`reverie.Client`.
    table: the table to sample.
    batch_size: samples per batch.
    max_in_flight_samples_per_worker: samples a worker asks for per request
      (and so holds at most). Default: 2 * batch_size.
    num_workers_per_iterator: parallel sample streams (-1: 1).
    max_samples_per_stream: samples after which a stream is reopened
      (-1: 10,000).
    rate_limiter_timeout_ms: how long the server may wait for the rate
      limiter before it gives up, ending the iteration; -1 waits forever.
    max_samples: total samples per iterator (-1: unlimited).
    prefetch: batches assembled ahead of the consumer.
    drop_remainder: drop a last batch smaller than batch_size.
    structure: a nest the flat columns are packed into (overrides the
      signature).
    unpack_as_table_signature: use the table's signature as the structure
      (one ServerInfo call, cached by the client; skipped if it takes longer
      than 30 s).
    in_subprocess: sample and batch in a child process (a new interpreter,
      started at each ``iter``) rather than on a thread of this one. The
      decoding then no longer competes with the learner's Python for the
      GIL; a learner whose steps run Python between batches gets its
      batches sooner. The batches, errors and closing are the same. The
      child makes its own client from the client's arguments.
  """

  def __init__(self,
               client,
               table: str,
               batch_size: int,
               *,
               max_in_flight_samples_per_worker: Optional[int] = None,
               num_workers_per_iterator: int = 1,
               max_samples_per_stream: int = -1,
               rate_limiter_timeout_ms: int = -1,
               max_samples: int = -1,
               prefetch: int = 2,
               drop_remainder: bool = False,
               structure: Any = None,
               unpack_as_table_signature: bool = True,
               in_subprocess: bool = False):
    if batch_size < 1:
      raise errors.InvalidArgumentError(
          f'batch_size must be >= 1, got {batch_size}')
    if prefetch < 1:
      raise errors.InvalidArgumentError(
          f'prefetch must be >= 1, got {prefetch}')
    if max_in_flight_samples_per_worker is None:
      max_in_flight_samples_per_worker = 2 * batch_size
    self._client = client
    self._table = table
    self._batch_size = int(batch_size)
    self._sampler_kwargs = dict(
        max_samples=max_samples,
        num_workers=num_workers_per_iterator,
        max_in_flight_samples_per_worker=max_in_flight_samples_per_worker,
        rate_limiter_timeout_ms=rate_limiter_timeout_ms,
        max_samples_per_stream=max_samples_per_stream)
    # Validate the sampler arguments now rather than at the first iter().
    sampler_lib.Sampler.validate_args(table, **self._sampler_kwargs)
    self._prefetch = int(prefetch)
    self._drop_remainder = bool(drop_remainder)
    self._structure = structure
    self._unpack = unpack_as_table_signature and structure is None
    self._in_subprocess = bool(in_subprocess)

  @property
  def table(self):
    return self._table

  @property
  def batch_size(self):
    return self._batch_size

  def _resolve_structure(self):
    if not self._unpack:
      return self._structure
    try:
      return self._client._get_signature(  # pylint: disable=protected-access
          self._table, timeout=_SIGNATURE_TIMEOUT_S, refresh=True)
    except errors.InvalidArgumentError:
      # Unknown table: the sampler reports it (TableNotFoundError).
      return None
    except errors.DeadlineExceededError as e:
      log.warning('reverie dataset: no signature of table %r (%s); yielding '
                  'flat columns', self._table, e)
      return None

  def __iter__(self):
    if self._in_subprocess:
      from reverie import _procdataset  # pylint: disable=g-import-not-at-top
      return _procdataset.ProcessDatasetIterator(
          self._client, self._table, self._batch_size,
          self._resolve_structure(), self._prefetch, self._drop_remainder,
          self._sampler_kwargs)
    return DatasetIterator(self._client, self._table, self._batch_size,
                           self._resolve_structure(), self._prefetch,
                           self._drop_remainder, self._sampler_kwargs)


class _FastColumn:
  """How every sample of a batch stores a column when it is one whole
  chunk tensor: the tensor's dtype and shape (as a message, compared with
  ==), the squeeze flag, and the bytes of the column's batch array."""
  __slots__ = ('dt', 'shape', 'rows', 'squeeze', 'delta', 'mv', 'row_bytes')

  def __init__(self, tensor, rows, squeeze, array):
    self.dt = tensor.dtype
    self.shape = type(tensor.tensor_shape)()
    self.shape.CopyFrom(tensor.tensor_shape)
    self.rows = rows
    self.squeeze = squeeze
    self.delta = len(self.shape.dim) >= 2 and self.dt in encoding.DELTA_DTYPES
    self.mv = memoryview(array.reshape(-1).view(np.uint8))
    self.row_bytes = array[0].nbytes if len(array) else 0


def _find_chunk(chunks, key):
  for chunk in chunks:
    if chunk.chunk_key == key:
      return chunk
  return None


def _fast_layout(info, chunks, arrays):
  """_FastColumns for the columns of the first sample of a batch that are
  one whole chunk tensor (None for the others)."""
  out = []
  for col, array in zip(info.item.flat_trajectory.columns, arrays):
    slices = col.chunk_slices
    f = None
    if len(slices) == 1 and array.dtype.kind not in 'OSU':
      cs = slices[0]
      chunk = _find_chunk(chunks, cs.chunk_key)
      if chunk is not None and 0 <= cs.index < len(chunk.data.tensors):
        t = chunk.data.tensors[cs.index]
        dims = t.tensor_shape.dim
        if len(dims) and cs.offset == 0 and cs.length == dims[0].size:
          f = _FastColumn(t, cs.length, col.squeeze, array)
    out.append(f)
  return out


class _Batch:
  """A batch being filled: one array per column, [batch_size, *shape],
  laid out after the first sample. Samples are decoded straight into it:
  a column that is one whole chunk tensor, like the first sample's (the
  common case), is decompressed into its row of the batch array; anything
  else goes through ``sampler.decode_sample``."""

  def __init__(self, size, info, chunks):
    _, cols = sampler_lib.decode_sample(info, chunks)
    self.arrays = [np.empty((size,) + c.shape, c.dtype) for c in cols]
    self.shapes = [c.shape for c in cols]
    self.size = size
    self.n = 0
    self.infos = ([], [], [], [], [])
    fast = _fast_layout(info, chunks, self.arrays)
    self.fast = fast if all(f is not None for f in fast) else None
    self._append(info, cols)

  def _append(self, info, cols):
    i = self.n
    if len(cols) != len(self.arrays):
      raise errors.InvalidArgumentError(
          f'cannot batch samples with {len(cols)} and {len(self.arrays)} '
          f'columns (item {info.item.key})')
    for c, col in enumerate(cols):
      if col.shape != self.shapes[c]:
        raise errors.InvalidArgumentError(
            f'cannot batch column {c}: the samples have shapes '
            f'{sorted({col.shape, self.shapes[c]})}; only items whose '
            'columns have equal shapes can be batched')
      if col.dtype != self.arrays[c].dtype:
        raise errors.InvalidArgumentError(
            f'cannot batch column {c}: the samples have dtypes '
            f'{col.dtype} and {self.arrays[c].dtype} (item {info.item.key}); '
            'only items whose columns have equal dtypes can be batched')
      self.arrays[c][i:i + 1] = col[np.newaxis]
    self._info(info.item, info)

  def _info(self, item, info):
    keys, probs, sizes, prios, times = self.infos
    keys.append(item.key)
    probs.append(info.probability)
    sizes.append(info.table_size)
    prios.append(item.priority)
    times.append(item.times_sampled)
    self.n += 1

  def add(self, info, chunks):
    """Decodes one raw sample into the next row."""
    if self.fast is not None:
      try:
        if self._add_fast(info, chunks):
          return
      except Exception:  # pylint: disable=broad-except
        pass  # decode_sample reports what is wrong
    self._append(info, sampler_lib.decode_sample(info, chunks)[1])

  def _add_fast(self, info, chunks):
    item = info.item
    cols = item.flat_trajectory.columns
    fast = self.fast
    if len(cols) != len(fast):
      return False
    i = self.n
    single = chunks[0] if len(chunks) == 1 else None
    decompress = encoding.decompress_raw_into
    # Indexing a repeated field of upb messages costs a fifth of iterating
    # over it (which makes an iterator object each time).
    for c in range(len(fast)):
      f = fast[c]
      col = cols[c]
      slices = col.chunk_slices
      if len(slices) != 1:
        return False
      cs = slices[0]
      if cs.offset or cs.length != f.rows or col.squeeze != f.squeeze:
        return False
      key = cs.chunk_key
      chunk = single
      if chunk is None or chunk.chunk_key != key:
        chunk = _find_chunk(chunks, key)
        if chunk is None:
          return False
      if f.delta and chunk.delta_encoded:
        return False
      t = chunk.data.tensors[cs.index]
      if t.dtype != f.dt or t.tensor_shape != f.shape:
        return False
      n = f.row_bytes
      if decompress(t.tensor_content, f.mv[i * n:i * n + n]) != n:
        return False
    keys, probs, sizes, prios, times = self.infos
    keys.append(item.key)
    probs.append(info.probability)
    sizes.append(info.table_size)
    prios.append(item.priority)
    times.append(item.times_sampled)
    self.n = i + 1
    return True

  def full(self):
    return self.n == self.size

  def result(self, unflatten):
    n = self.n
    arrays = self.arrays if n == self.size else [a[:n] for a in self.arrays]
    info = sampler_lib.SampleInfo(*[
        np.array(f, dtype=d)
        for f, d in zip(self.infos, sampler_lib.SampleInfo.dtypes())
    ])
    return sampler_lib.ReplaySample(info, unflatten(arrays))


class _Batcher:
  """The sampler's sink: decodes raw samples into batches and queues them."""

  def __init__(self, batch_size, out, drop_remainder, unflatten):
    self._batch_size = batch_size
    self._out = out
    self._drop_remainder = drop_remainder
    self._unflatten = unflatten
    self._lock = threading.Lock()
    self._batch = None

  def put(self, raw_samples):
    done = []
    err = None
    with self._lock:
      for info, chunks in raw_samples:
        b = self._batch
        try:
          if b is None:
            b = self._batch = _Batch(self._batch_size, info, chunks)
          else:
            b.add(info, chunks)
        except errors.ReverieError as e:
          # The batches completed before the bad sample go out first
          # (the partial one at close), then the error.
          err = e
          break
        if b.full():
          done.append(b)
          self._batch = None
    for b in done:
      if not self._out.put(b.result(self._unflatten)):
        return False
    if err is not None:
      raise err
    return True

  def close(self):
    """The sampler finished: queue the remainder, then end the channel."""
    with self._lock:
      rest, self._batch = self._batch, None
    try:
      if rest is not None and rest.n and not self._drop_remainder:
        self._out.put(rest.result(self._unflatten))
    finally:
      self._out.close()

  def abort(self):
    self._out.close()
    self._out.clear()
    with self._lock:
      self._batch = None


def raise_end(err):
  """Ends an iteration whose sampler stopped with err: StopIteration when
  it finished or its rate limiter timeout passed, else err itself."""
  if err is None or isinstance(err, errors.RateLimiterTimeoutError):
    raise StopIteration
  raise err


class DatasetIterator:
  """One pass over a Dataset: a sampler whose workers assemble batches.

  Close it (or use it as a context manager) to stop the background threads
  early; it closes itself when exhausted.
  """

  def __init__(self, client, table, batch_size, structure, prefetch,
               drop_remainder, sampler_kwargs):
    self._out = _channel.Channel(prefetch)
    self._batcher = _Batcher(batch_size, self._out, drop_remainder,
                             sampler_lib.unflattener(structure))
    self._sampler = sampler_lib.Sampler(
        client, table, sink=self._batcher, **sampler_kwargs)
    self._done = False

  def __iter__(self):
    return self

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def __next__(self):
    if self._done:
      raise StopIteration
    try:
      return self._out.get()
    except _channel.Closed:
      pass
    self._done = True
    err = self._sampler.error
    self._sampler.close()
    raise_end(err)

  def close(self):
    self._done = True
    self._sampler.close()

  def __del__(self):
    try:
      self._sampler.close(timeout=0)
    except Exception:  # pylint: disable=broad-except
      pass
