"""Sampling: SampleStream workers and sample decoding.

A :class:`Sampler` runs ``num_workers`` background threads. Each opens a
SampleStream and asks for ``max_in_flight_samples_per_worker`` samples per
request, keeping two requests outstanding so that the server starts on the
next while the current one is read; it reads exactly the samples it asked
for (the server must never sample more than asked: sampling has side
effects). A worker abandons its stream after ``max_samples_per_stream``
samples and opens a new one. Streams that fail with UNAVAILABLE or
CANCELLED are reopened with exponential backoff (1 ms doubling to 1 s);
samples requested but not received are given back to the ``max_samples``
budget, so the table sees exactly ``max_samples`` samples in total. Any
other failure, including the rate limiter's timeout, stops the sampler and
is raised to the consumer once the samples received before it are used up.
"""

import collections
import logging
import threading
import time
from typing import Any, NamedTuple, Sequence, Union

import grpc
import numpy as np

from reverie import _channel
from reverie import _tree
from reverie import encoding
from reverie import errors
from reverie._proto.deepmind.reverb import reverb_service_pb2
from reverie._proto.deepmind.reverb import schema_pb2

log = logging.getLogger('reverie')

DEFAULT_MAX_IN_FLIGHT_SAMPLES_PER_WORKER = 100
DEFAULT_MAX_SAMPLES_PER_STREAM = 10_000
# Requests a worker keeps outstanding on its stream (see Sampler._stream).
_PIPELINE = 2
_MIN_BACKOFF_S = 0.001
_MAX_BACKOFF_S = 1.0


class SampleInfo(NamedTuple):
  """What the server said about a sampled item (as dm-reverb's).

  In a batch from a dataset every field is a numpy array with one entry
  per sample.
  """
  key: Union[int, np.ndarray]
  probability: Union[float, np.ndarray]
  table_size: Union[int, np.ndarray]
  priority: Union[float, np.ndarray]
  times_sampled: Union[int, np.ndarray]

  @classmethod
  def dtypes(cls):
    """numpy dtypes of the fields in batches."""
    return cls(np.dtype(np.uint64), np.dtype(np.float64),
               np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.int32))

  @classmethod
  def zeros(cls):
    return cls(0, 0.0, 0, 0.0, 0)


class ReplaySample(NamedTuple):
  """A sampled item: its info and its data (a nest of numpy arrays, or the
  flat list of columns when no structure is known)."""
  info: SampleInfo
  data: Union[Sequence[np.ndarray], Any]


# --- decoding ------------------------------------------------------------


def timeout_ms(rate_limiter_timeout_ms):
  """The Timeout.milliseconds to send: -1 waits forever; a real timeout is
  sent as at least 1 ms, because Reverb's server waits forever on 0."""
  if rate_limiter_timeout_ms is None or rate_limiter_timeout_ms < 0:
    return -1
  return max(1, int(np.ceil(rate_limiter_timeout_ms)))


def _malformed(item, msg):
  return errors.MalformedSampleError(
      f'table {item.table!r}, item {item.key}: {msg}')


def decode_sample(info, chunks):
  """``(SampleInfo, [column arrays])`` of one sample.

  ``info`` is the SampleInfo message, ``chunks`` the ChunkData messages of
  the sample (a list, or a dict by chunk key). A column is the
  concatenation of the chunk rows its slices reference, with the leading
  axis dropped when the column is squeezed. Columns of a single slice are
  views of the decoded chunk tensor (which no one else holds).
  """
  if not isinstance(chunks, dict):
    chunks = {c.chunk_key: c for c in chunks}
  item = info.item
  sample_info = SampleInfo(item.key, info.probability, info.table_size,
                           item.priority, item.times_sampled)
  columns = item.flat_trajectory.columns
  if not len(columns):  # pylint: disable=g-explicit-length-test
    raise _malformed(item, 'no trajectory columns')
  decoded = {}
  out = []
  for ci, col in enumerate(columns):
    parts = []
    for cs in col.chunk_slices:
      key = cs.chunk_key
      index = cs.index
      t = decoded.get((key, index))
      if t is None:
        chunk = chunks.get(key)
        if chunk is None:
          raise _malformed(
              item, f'column {ci} references chunk {key}, which the sample '
              'does not contain')
        tensors = encoding.chunk_tensors(chunk)
        if not 0 <= index < len(tensors):
          raise _malformed(
              item, f'column {ci}: chunk {key} has {len(tensors)} tensors, '
              f'slice wants index {index}')
        try:
          t = encoding.decode_tensor(tensors[index], chunk.delta_encoded)
        except errors.ReverieError as e:
          raise _malformed(item, f'chunk {key}: {e}') from e
        if t.ndim == 0:
          raise _malformed(item, f'chunk {key} tensor {index} is a scalar')
        decoded[(key, index)] = t
      offset, length = cs.offset, cs.length
      if offset < 0 or length < 0 or offset + length > t.shape[0]:
        raise _malformed(
            item, f'column {ci}: rows [{offset}, {offset + length}) out of '
            f'range for chunk {key} of {t.shape[0]} rows')
      if offset == 0 and length == t.shape[0]:
        parts.append(t)
      else:
        parts.append(t[offset:offset + length])
    if not parts:
      raise _malformed(item, f'column {ci} has no chunk slices')
    if len(parts) == 1:
      arr = parts[0]
    else:
      if any(p.dtype != parts[0].dtype for p in parts):
        # np.concatenate would promote them (int64 and uint64 to
        # float64) without a word.
        raise _malformed(item, f'column {ci}: its chunk slices differ in '
                         f'dtype ({", ".join(sorted({str(p.dtype) for p in parts}))})')
      try:
        arr = np.concatenate(parts)
      except ValueError as e:
        raise _malformed(item, f'column {ci}: {e}') from e
    if col.squeeze:
      if arr.shape[0] != 1:
        raise _malformed(
            item, f'column {ci} is squeezed but has {arr.shape[0]} rows')
      arr = arr[0, ...]  # a 0-d array rather than a numpy scalar
    out.append(arr)
  return sample_info, out


# --- the sampler ---------------------------------------------------------


class _SampleQueue:
  """The default sink: a bounded channel of lists of decoded samples."""

  def __init__(self, maxsize):
    self.channel = _channel.Channel(maxsize)

  def put(self, raw_samples):
    out = []
    try:
      for info, chunks in raw_samples:
        out.append(decode_sample(info, chunks))
    except errors.ReverieError:
      # The samples before the bad one were taken from the table: the
      # consumer gets them before the error.
      if out:
        self.channel.put(out)
      raise
    return self.channel.put(out)

  def close(self):
    self.channel.close()

  def abort(self):
    self.channel.close()
    self.channel.clear()


class _SamplerCore:
  """The state and workers of a :class:`Sampler`. The worker threads hold
  this, not the Sampler, so that a Sampler its user drops is collected and
  stops them."""

  def __init__(self,
               client,
               table: str,
               *,
               max_samples=None,
               num_workers: int = 1,
               max_in_flight_samples_per_worker: int = (
                   DEFAULT_MAX_IN_FLIGHT_SAMPLES_PER_WORKER),
               rate_limiter_timeout_ms=-1,
               max_samples_per_stream=None,
               sink=None,
               queue_size=None):
    (max_samples, num_workers, max_in_flight_samples_per_worker,
     max_samples_per_stream) = self.validate_args(
         table, max_samples, num_workers, max_in_flight_samples_per_worker,
         rate_limiter_timeout_ms, max_samples_per_stream)
    self._client = client
    self._table = table
    self._in_flight = int(max_in_flight_samples_per_worker)
    self._per_stream = int(max_samples_per_stream)
    unlimited = max_samples is None
    self._max_samples = float('inf') if unlimited else int(max_samples)
    self._timeout = schema_pb2.Timeout(
        milliseconds=timeout_ms(rate_limiter_timeout_ms))
    workers = int(num_workers)
    if not unlimited:
      needed = -(-int(max_samples) // self._in_flight)
      workers = max(1, min(workers, needed))
    if sink is None:
      sink = _SampleQueue(queue_size or 2 * workers)
    self._sink = sink

    self._lock = threading.Lock()
    self._budget = threading.Condition(self._lock)
    self._requested = 0  # samples asked for (and not given back)
    self._delivered = 0  # samples handed to the sink
    self._error = None  # first terminal error
    self._last_transient = None  # last UNAVAILABLE/CANCELLED seen
    self._closed = False
    self._stop = threading.Event()
    self._calls = set()
    self._local = collections.deque()  # samples taken from the sink
    self._next_lock = threading.Lock()
    self._running = workers
    self._threads = []
    if self._max_samples == 0:
      self._running = 0
      self._sink.close()
      return
    for i in range(workers):
      t = threading.Thread(
          target=self._run_worker, args=(i,), daemon=True,
          name=f'reverie-sampler-{table}-{i}')
      self._threads.append(t)
    for t in self._threads:
      t.start()

  @staticmethod
  def validate_args(table, max_samples=None, num_workers=1,
                    max_in_flight_samples_per_worker=(
                        DEFAULT_MAX_IN_FLIGHT_SAMPLES_PER_WORKER),
                    rate_limiter_timeout_ms=-1, max_samples_per_stream=None):
    """Checks the arguments; returns (max_samples or None, num_workers,
    max_in_flight_samples_per_worker, max_samples_per_stream)."""
    if not table or not isinstance(table, str):
      raise errors.InvalidArgumentError(f'Sampler: bad table name {table!r}')
    if max_samples == -1:
      max_samples = None
    if max_samples is not None and max_samples < 0:
      raise errors.InvalidArgumentError(
          f'max_samples must be -1, None or >= 0, got {max_samples}')
    if num_workers is None or num_workers == -1:
      num_workers = 1
    if num_workers < 1:
      raise errors.InvalidArgumentError(
          f'num_workers must be >= 1 (or -1), got {num_workers}')
    if max_in_flight_samples_per_worker < 1:
      raise errors.InvalidArgumentError(
          'max_in_flight_samples_per_worker must be >= 1, got '
          f'{max_in_flight_samples_per_worker}')
    if rate_limiter_timeout_ms is not None and not isinstance(
        rate_limiter_timeout_ms, (int, float, np.integer, np.floating)):
      raise errors.InvalidArgumentError(
          f'rate_limiter_timeout_ms must be a number, got '
          f'{rate_limiter_timeout_ms!r}')
    if max_samples_per_stream is None or max_samples_per_stream == -1:
      max_samples_per_stream = DEFAULT_MAX_SAMPLES_PER_STREAM
    if max_samples_per_stream < 1:
      raise errors.InvalidArgumentError(
          'max_samples_per_stream must be >= 1 (or -1), got '
          f'{max_samples_per_stream}')
    return (max_samples, int(num_workers),
            int(max_in_flight_samples_per_worker), int(max_samples_per_stream))

  # -- consumer side (Sampler is the iterator and context manager) --

  @property
  def error(self):
    """The terminal error that stopped the workers, if any."""
    with self._lock:
      return self._error

  @property
  def last_transient_error(self):
    with self._lock:
      return self._last_transient

  def end_error(self):
    """What the consumer sees after the last sample: the terminal error, a
    ClosedError after close(), or StopIteration when max_samples were
    returned."""
    with self._lock:
      if self._error is not None:
        return self._error
      if self._closed:
        return errors.ClosedError('sampler closed')
      return StopIteration()

  def next(self, timeout=None):
    """The next sample, as ``(SampleInfo, [column arrays])``.

    Blocks until one is available or ``timeout`` seconds passed (then raises
    DeadlineExceededError, or ServerUnavailableError if the last stream
    failed to reach the server). Raises StopIteration after ``max_samples``,
    the terminal error (e.g. RateLimiterTimeoutError, TableNotFoundError)
    once the samples received before it are used up, and ClosedError after
    close().
    """
    if not isinstance(self._sink, _SampleQueue):
      raise errors.InvalidArgumentError('Sampler.next: a custom sink is set')
    with self._next_lock:
      if self._local:
        return self._local.popleft()
      try:
        batch = self._sink.channel.get(timeout)
      except _channel.Closed:
        raise self.end_error() from None
      except _channel.Empty:
        raise self._wait_timeout_error(timeout) from None
      self._local.extend(batch)
      return self._local.popleft()

  def _wait_timeout_error(self, timeout):
    last = self.last_transient_error
    what = f'sample from table {self._table!r} at {self._client.server_address}'
    if last is not None:
      return errors.ServerUnavailableError(
          f'{what}: no sample within {timeout}s; the server is unavailable: '
          f'{last.details}', code=last.code, details=last.details)
    return errors.DeadlineExceededError(
        f'{what}: no sample within {timeout}s',
        code=grpc.StatusCode.DEADLINE_EXCEEDED)

  def close(self, timeout=10.0):
    """Stops the workers and waits (up to ``timeout`` s) for them to exit.
    Idempotent."""
    with self._lock:
      if not self._closed:
        self._closed = True
      # Set under the lock: a worker registers a new call under it only
      # if _stop is not set, so every call is in this copy or never made.
      self._stop.set()
      calls = list(self._calls)
      self._budget.notify_all()
    abort = getattr(self._sink, 'abort', None) or self._sink.close
    abort()
    for c in calls:
      c.cancel()
    deadline = time.monotonic() + timeout
    for t in self._threads:
      if t is not threading.current_thread():
        t.join(max(0.0, deadline - time.monotonic()))

  # -- workers --

  def _fail(self, err):
    with self._lock:
      if self._error is None and not self._closed:
        self._error = err
      self._stop.set()  # under the lock: see close
      calls = list(self._calls)
      self._budget.notify_all()
    for c in calls:
      c.cancel()

  def _reserve(self, want, block=True):
    """Takes up to ``want`` samples of the max_samples budget; 0 when the
    sampler stops or everything was delivered. With ``block``, waits while
    the budget is spent but other requests may give some back."""
    with self._lock:
      while True:
        if self._stop.is_set() or self._delivered >= self._max_samples:
          return 0
        n = min(want, self._max_samples - self._requested)
        if n > 0:
          self._requested += n
          return int(n)
        if not block:
          return 0
        self._budget.wait()

  def _release(self, n):
    if n <= 0:
      return
    with self._lock:
      self._requested -= n
      self._budget.notify_all()

  def _deliver(self, samples):
    if not self._sink.put(samples):
      return False
    with self._lock:
      self._delivered += len(samples)
      if self._delivered >= self._max_samples:
        self._budget.notify_all()
    return True

  def _run_worker(self, worker):
    backoff = _MIN_BACKOFF_S
    try:
      while True:
        delivered, err = self._stream()
        if self._stop.is_set():
          return
        if err is None:
          if delivered == 0:
            return  # budget spent
          backoff = _MIN_BACKOFF_S
          continue
        if not errors.is_transient(err):
          self._fail(err)
          return
        if self._client.closed:
          self._fail(errors.ClosedError(
              f'sampler: the client was closed ({err.details})'))
          return
        with self._lock:
          self._last_transient = err
        if delivered > 0:
          backoff = _MIN_BACKOFF_S
        log.warning('reverie sampler: stream of table %r failed (%s); '
                    'reopening in %.3fs', self._table, err, backoff)
        if self._stop.wait(backoff):
          return
        backoff = min(2 * backoff, _MAX_BACKOFF_S)
    except BaseException as e:  # pylint: disable=broad-except
      if not isinstance(e, errors.ReverieError):
        e = errors.ReverieError(f'sampler worker failed: {e!r}')
      self._fail(e)
    finally:
      with self._lock:
        self._running -= 1
        last = self._running == 0
      if last:
        self._sink.close()

  def _stream(self):
    """One stream: requests until max_samples_per_stream or the budget is
    spent. Returns (samples delivered, error or None).

    Requests are pipelined _PIPELINE deep: the next one is sent while the
    current one is read, so the server starts on it without waiting for a
    round trip. The server still serves them one at a time, in order, and
    the budget is reserved per request, so no more samples are taken than
    max_samples; samples of requests that are not completely read when the
    stream ends are lost, as with a cancelled request.
    """
    requests = _channel.Requests()
    reader = _StreamReader(self, None)
    outstanding = collections.deque()  # sizes of requests sent, not read
    asked = 0  # samples requested on this stream
    delivered = 0
    try:
      while True:
        while len(outstanding) < _PIPELINE and asked < self._per_stream:
          n = self._reserve(min(self._in_flight, self._per_stream - asked),
                            block=not outstanding)
          if n == 0:
            break
          if reader.call is None:
            # Fail fast at first (so that a consumer's timeout can tell the
            # server is unreachable); after a failure, wait for the
            # connection (some gRPC versions keep failing fast-fail calls
            # long after the server is back).
            call = self._client._stub.SampleStream(  # pylint: disable=protected-access
                requests, wait_for_ready=self._last_transient is not None)
            with self._lock:
              if self._stop.is_set():
                self._requested -= n
                call.cancel()
                return delivered, None
              self._calls.add(call)
            reader.call = call
          requests.put(reverb_service_pb2.SampleStreamRequest(
              table=self._table, num_samples=n,
              rate_limiter_timeout=self._timeout))
          outstanding.append(n)
          asked += n
        if not outstanding:
          return delivered, None
        n = outstanding[0]
        got, err = reader.read(n, more=len(outstanding) > 1)
        delivered += got
        if err is not None:
          self._release(n - got + sum(outstanding) - n)
          return delivered, err
        outstanding.popleft()
        with self._lock:
          self._last_transient = None
    finally:
      if reader.call is not None:
        reader.call.cancel()
        with self._lock:
          self._calls.discard(reader.call)
      requests.close()


class Sampler:
  """Streams decoded samples of one table from the server.

  Workers start at construction. Consume with :meth:`next` (or iterate),
  and call :meth:`close` when done (or use it as a context manager).
  Samples taken from the table but not consumed are lost on close, as in
  Reverb. A Sampler is safe for concurrent use.

  Args:
    client: the :class:`reverie.Client`.
    table: the table to sample from.
    max_samples: total number of samples to return; None or -1 means no
      limit. Never exceeded on the server either.
    num_workers: parallel streams. With ``max_samples`` no more are started
      than ``ceil(max_samples / max_in_flight_samples_per_worker)``.
    max_in_flight_samples_per_worker: samples per SampleStreamRequest.
    rate_limiter_timeout_ms: how long the server may wait for the table's
      rate limiter before the first sample of a request; -1 or None waits
      forever. Real timeouts are sent as at least 1 ms.
    max_samples_per_stream: samples after which a worker reopens its stream.
    sink: where samples go; internal (see ``next``) if None. An object with
      ``put(raw_samples) -> bool`` (False: stop) and ``close()``, called
      from the worker threads; a raw sample is ``(SampleInfo message, [its
      ChunkData messages])``, see ``decode_sample``. It may raise a
      ReverieError, which stops the sampler.
    queue_size: for the internal sink, how many responses' worth of samples
      may wait for the consumer (default: 2 per worker).
  """

  def __init__(self, *args, **kwargs):
    self._core = _SamplerCore(*args, **kwargs)

  validate_args = staticmethod(_SamplerCore.validate_args)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def __iter__(self):
    return self

  def __next__(self):
    try:
      return self._core.next()
    except errors.ClosedError:
      raise StopIteration from None

  @property
  def error(self):
    """The terminal error that stopped the workers, if any."""
    return self._core.error

  @property
  def last_transient_error(self):
    return self._core.last_transient_error

  def end_error(self):
    """See :meth:`_SamplerCore.end_error`."""
    return self._core.end_error()

  def next(self, timeout=None):
    """The next sample, as ``(SampleInfo, [column arrays])``: see
    :meth:`_SamplerCore.next`."""
    return self._core.next(timeout)

  def close(self, timeout=10.0):
    """Stops the workers and waits (up to ``timeout`` s) for them to exit.
    Idempotent."""
    self._core.close(timeout)

  def __getattr__(self, name):
    # The rest of the core (tests look at its threads).
    core = self.__dict__.get('_core')
    if core is None:
      raise AttributeError(name)
    return getattr(core, name)

  def __del__(self):
    # A Sampler dropped without close: its workers hold only the core, so
    # this runs, and stops them and their streams.
    core = self.__dict__.get('_core')
    if core is None:
      return
    try:
      if not core._closed:  # pylint: disable=protected-access
        core.close(timeout=0)
    except Exception:  # pylint: disable=broad-except
      pass


class _StreamReader:
  """Reads the samples of one stream, request by request. A response may
  hold the end of one request and the start of the next (Reverb may merge
  them into one message), so entries left over are kept for the next
  read."""

  def __init__(self, sampler, call):
    self._s = sampler
    self.call = call
    self._entries = None  # entries of the last response
    self._pos = 0  # the first one not read yet

  def read(self, n, more):
    """Reads exactly n samples and delivers them. ``more``: another request
    is outstanding, so entries beyond the n samples are its."""
    s = self._s
    table = s._table  # pylint: disable=protected-access
    got = 0
    pending_info = None
    pending_chunks = None
    while got < n:
      entries, pos = self._entries, self._pos
      if entries is None or pos >= len(entries):
        try:
          entries = next(self.call).entries
        except StopIteration:
          return got, errors.ServerUnavailableError(
              f'sample from table {table!r}: the server ended the stream '
              'before the request was served', code=grpc.StatusCode.UNAVAILABLE)
        except grpc.RpcError as e:
          if s._stop.is_set():  # pylint: disable=protected-access
            return got, errors.ClosedError('sampler closed')
          return got, errors.from_rpc_error(e, f'sample from table {table!r}')
        pos = 0
      batch = []
      end = len(entries)
      while pos < end:
        entry = entries[pos]
        if pending_info is None:
          if got + len(batch) == n:
            break  # the next request's
          if not entry.HasField('info'):
            return got, errors.MalformedSampleError(
                f'table {table!r}: first entry of a sample has no info')
          pending_info = entry.info
          pending_chunks = entry.data
        else:  # a continuation entry of the same sample
          pending_chunks = list(pending_chunks) + list(entry.data)
        pos += 1
        if entry.end_of_sequence:
          batch.append((pending_info, pending_chunks))
          pending_info = pending_chunks = None
      self._entries, self._pos = entries, pos
      if batch:
        try:
          if not s._deliver(batch):  # pylint: disable=protected-access
            return got, errors.ClosedError('sampler closed')
        except errors.ReverieError as e:
          return got, e
        got += len(batch)
    if pending_info is not None or (
        not more and self._entries is not None and
        self._pos < len(self._entries)):
      return got, errors.ServerError(
          f'sample from table {table!r}: the server sent more than the {n} '
          'samples requested')
    return got, None


def timesteps(sample_info, columns, unflatten):
  """Splits a trajectory into ReplaySamples of one step each."""
  lengths = set()
  for c in columns:
    if c.ndim == 0:
      raise ValueError("Can't split non timestep trajectory into timesteps: "
                       'a column is squeezed to a single value.')
    lengths.add(c.shape[0])
  if len(lengths) != 1:
    raise ValueError("Can't split non timestep trajectory into timesteps: "
                     f'columns have lengths {sorted(lengths)}.')
  n = lengths.pop()
  return [ReplaySample(sample_info, unflatten([c[i, ...] for c in columns]))
          for i in range(n)]


def unflattener(structure):
  if structure is None:
    return lambda flat: flat
  return lambda flat: _tree.unflatten_as(structure, flat)
