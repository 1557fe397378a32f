"""TrajectoryWriter: appends steps column by column and inserts items made
of references to recent steps, as dm-reverb's TrajectoryWriter does.

Every leaf of the appended data is a column with its own chunker: the
column's steps are batched into chunks of one tensor ([rows, *step shape])
each. ``writer.history`` holds references to the last
``num_keep_alive_refs`` steps of every column; items are nests of
:class:`TrajectoryColumn` built by indexing it.

A background thread streams chunks and items over one InsertStream. A chunk
is sent, once per stream, with the first request holding an item that
references it; an item is sent once every chunk it references is complete,
so items that reference the newest steps wait until their chunks fill up,
or until ``flush`` (or backpressure in ``create_item``) finalises them
early. Each request lists in ``keep_chunk_keys`` the chunks sent on the
stream that the histories or queued items still reference.

When the stream fails with UNAVAILABLE or CANCELLED the writer reconnects
with exponential backoff (1 ms doubling to 1 s, reset after a stream that
lived 2 s) and re-sends every unconfirmed item with its chunks; the server
treats an existing key as a priority update, so nothing is inserted twice.
Any other failure is sticky: every later call raises it.
"""

import collections
import logging
import sys
import threading
import time
import weakref
from typing import Optional

import grpc
import numpy as np

from reverie import _keys
from reverie import _tree
from reverie import _wire
from reverie import encoding
from reverie import errors
from reverie import specs
from reverie._proto.deepmind.reverb import reverb_service_pb2

log = logging.getLogger('reverie')

DEFAULT_MAX_IN_FLIGHT_ITEMS = 128
# A request is closed once its chunks and items reach this size (a single
# item with larger chunks still goes out in one request). Reverb's writers
# close one at 40 MiB, but a gRPC-Go server (reverie's) holds a request
# whole until its last byte arrives, so large requests cost it memory per
# writer. 4 MiB, as reverie's Go writer: 8 writers of 400 kB items sent as
# many items/s as at 40 MiB, and 0.75-0.8x as many at 1 MiB (each message
# costs gRPC's Python layer).
_MAX_REQUEST_BYTES = 4 << 20
_AUTO_TUNE_ITEMS = 10
_MIN_BACKOFF_S = 0.001
_MAX_BACKOFF_S = 1.0
_BACKOFF_RESET_S = 2.0
_INSERT_STREAM = '/deepmind.reverb.ReverbService/InsertStream'
# The sender waits up to _COALESCE_S for _COALESCE_ITEMS ready items before
# it sends a request, so that a fast producer sends few large requests
# rather than many small ones (each message costs gRPC's Python layer far
# more than an item's bytes). flush() and a create_item blocked on
# max_in_flight_items have everything sent at once.
_COALESCE_ITEMS = 32
_COALESCE_S = 0.002
# How long create_item waits for a table signature before skipping the
# validation of that table's items.
_SIGNATURE_TIMEOUT_S = 30.0
# A writer dropped without close() flushes for up to this long (as Acme's
# adders do when they are deleted), then closes, waiting up to
# _RELEASE_JOIN_S for its stream thread.
RELEASE_TIMEOUT_MS = 10_000
_RELEASE_JOIN_S = 1.0
_LOCK_PROBE_S = 0.1


class _Chunk:
  """A chunk of one column: open while it receives rows, then finalised.

  A finalised chunk of a numeric column is encoded (delta, Snappy, wire
  bytes) by the sender, when it is first sent, not by the caller: cramjam
  releases the GIL while it compresses, so there the compression overlaps
  the caller's next steps, and the caller's own run of the interpreter is
  not cut short (docs/benchmarks-notes.md, "The Python client beside
  other Python threads")."""
  __slots__ = ('key', 'kv', 'column', 'episode', 'steps', 'rows', 'array',
               'final', 'range', 'delta', 'data')

  def __init__(self, key_varint, column, episode):
    self.key, self.kv = key_varint
    self.column = column
    self.episode = episode  # varint of the episode id
    self.steps = []
    self.rows = []  # step arrays while open
    self.array = None  # the stacked rows once finalised
    self.final = False
    self.range = None  # SequenceRange bytes, once finalised
    self.delta = False
    self.data = None  # serialized ChunkData, once encoded

  def encode(self):
    """The chunk's ChunkData bytes, encoded on first use. The array and
    range of a finalised chunk never change, so two threads encoding it
    at once make the same bytes."""
    data = self.data
    if data is None:
      arr = self.array
      tensor = _wire.tensor_proto(*encoding.tensor_content(arr, self.delta))
      data = self.data = _wire.chunk_data(self.kv, self.range, [tensor],
                                          self.delta,
                                          encoding.total_bytes(arr))
    return data

  def size(self):
    """The encoded size, or the array's bytes before encoding."""
    data = self.data
    return len(data) if data is not None else self.array.nbytes


class _Cell:
  """One step of one column: a row of a chunk."""
  __slots__ = ('chunk', 'row', 'live', 'wire')

  def __init__(self, chunk, row):
    self.chunk = chunk
    self.row = row
    self.live = True  # False once the step left the history
    # The chunk_slices field of a column of this step alone, made by the
    # first item that is such a column (an item per step, or N-step
    # transitions, reference each step's cell again and again).
    self.wire = None

  def slice_field(self):
    w = self.wire
    if w is None:
      w = self.wire = _wire.slice_field(self.chunk.kv, self.row, 1)
    return w

  def numpy(self):
    """The step's stored array itself (callers copy it)."""
    c = self.chunk
    return c.rows[self.row] if c.array is None else c.array[self.row, ...]


class _Column:
  __slots__ = ('path', 'dtype', 'shape', 'refs', 'open', 'item_lens',
               'lens_sum', 'chunk_length')

  def __init__(self, path, dtype, shape, keep, padding):
    self.path = path
    self.dtype = dtype
    self.shape = shape
    self.refs = collections.deque([None] * padding, maxlen=keep)
    self.open = None
    self.item_lens = collections.deque(maxlen=_AUTO_TUNE_ITEMS)
    self.lens_sum = 0  # sum(item_lens)
    self.chunk_length = None  # fixed by configure()


class _Item:
  """A created item: its wire bytes, the chunks it references and the
  chunks the history referenced when it was created (``keep``)."""
  __slots__ = ('seq', 'key', 'data', 'chunks', 'keep')

  def __init__(self, seq, key, data, chunks, keep):
    self.seq = seq
    self.key = key
    self.data = data
    self.chunks = chunks
    self.keep = keep

  def ready(self):
    for c in self.chunks:
      if not c.final:
        return False
    return True


class TrajectoryColumn:
  """References to steps of one column, in order: one column of an item.

  Built by indexing ``writer.history``; an integer index gives a squeezed
  column (samples see the step's own shape), a slice or a list of indices
  a column of shape [len, *step shape].
  """

  def __init__(self, cells, *, squeeze=False, path=None):
    cells = tuple(cells)
    if squeeze and len(cells) != 1:
      raise ValueError(
          'Columns must contain exactly one data reference when squeeze set, '
          f'got {len(cells)}')
    if any(c is None for c in cells):
      raise ValueError(
          'TrajectoryColumns cannot contain any None data references: '
          f'TrajectoryColumn at path {path} references a step that is no '
          'longer (or not) in the history')
    self._cells = cells
    self.is_squeezed = squeeze

  @classmethod
  def _squeezed(cls, cell):
    """The column of one step, cell (not None), without __init__'s
    checks: ``history[path][i]``, once per item in the common case."""
    tc = object.__new__(cls)
    tc._cells = (cell,)
    tc.is_squeezed = True
    return tc

  def __len__(self):
    return len(self._cells)

  def __iter__(self):
    return iter(self._cells)

  def __getitem__(self, val):
    if isinstance(val, (int, np.integer)):
      return TrajectoryColumn([self._cells[val]], squeeze=True)
    if isinstance(val, slice):
      return TrajectoryColumn(self._cells[val])
    if isinstance(val, list):
      return TrajectoryColumn([self._cells[i] for i in val])
    raise TypeError('TrajectoryColumn indices must be integers, slices or '
                    f'lists, not {type(val).__name__}')

  @property
  def shape(self):
    col = self._cells[0].chunk.column if self._cells else None
    step = col.shape if col is not None else ()
    return tuple(step) if self.is_squeezed else (len(self._cells), *step)

  @property
  def dtype(self):
    return self._cells[0].chunk.column.dtype

  def numpy(self):
    """A copy of the referenced steps stacked (or of the single step if
    squeezed): changing it changes nothing the writer holds or sends, as
    dm-reverb's copy out of its C++ buffers."""
    if any(not c.live for c in self._cells):
      raise RuntimeError('Cannot convert TrajectoryColumn with expired data '
                         'references to numpy array.')
    if self.is_squeezed:
      return self._cells[0].numpy().copy()
    return np.stack([c.numpy() for c in self._cells])


class _ColumnHistory:
  """``writer.history[path]``: the column's steps since the episode began
  (or the last ``end_episode(clear_buffers=True)``), of which only the last
  ``num_keep_alive_refs`` can still be referenced. Indexes like a list of
  all those steps: ``[-1]`` is the latest, ``[0]`` the first, slices and
  lists of indices select several."""

  def __init__(self, writer, path):
    self._writer = writer
    self._path = path

  def path(self):
    return self._path

  def __len__(self):
    with self._writer._lock:  # pylint: disable=protected-access
      return self._writer._hist_len  # pylint: disable=protected-access

  def _cell(self, i, hist_len, refs):
    offset = hist_len - len(refs)
    return refs[i - offset] if i >= offset else None

  def __getitem__(self, val):
    w = self._writer
    with w._lock:  # pylint: disable=protected-access
      w._check_usable()  # pylint: disable=protected-access
      n = w._hist_len  # pylint: disable=protected-access
      col = w._columns.get(self._path)  # pylint: disable=protected-access
      refs = col.refs if col is not None else ()
      if isinstance(val, (int, np.integer)):
        i = int(val)
        if i < 0:
          i += n
        if not 0 <= i < n:
          raise IndexError(f'history index {val} out of range: the history '
                           f'of column {self._path} holds {n} steps')
        cell = self._cell(i, n, refs)
        if cell is not None:  # the common case: history[path][-1]
          return TrajectoryColumn._squeezed(cell)  # pylint: disable=protected-access
        cells = [cell]
        squeeze = True
      elif isinstance(val, slice):
        cells = [self._cell(i, n, refs) for i in range(n)[val]]
        squeeze = False
      elif isinstance(val, list):
        cells = []
        for v in val:
          i = int(v) + (n if v < 0 else 0)
          if not 0 <= i < n:
            raise IndexError(f'history index {v} out of range: the history '
                             f'of column {self._path} holds {n} steps')
          cells.append(self._cell(i, n, refs))
        squeeze = False
      else:
        raise TypeError('history indices must be integers, slices or lists, '
                        f'not {type(val).__name__}')
    return TrajectoryColumn(cells, squeeze=squeeze, path=self._path + (val,))

  def __iter__(self):
    for i in range(len(self)):
      yield self[i]

  def __repr__(self):
    return f'_ColumnHistory(path={self._path})'


class _WriterCore:
  """The state and threads of a TrajectoryWriter (see there for the API).

  The background threads (the stream thread and gRPC's request thread)
  hold this core, never the TrajectoryWriter its user holds, so that a
  writer dropped without close() is collected: its finalizer then
  releases the core (flush for a bounded time, then close).
  """

  # Threads and locks. The caller's thread does all the encoding: steps,
  # chunks and items become wire bytes under _lock, which guards the
  # columns, histories and the items waiting for their chunks (_queue).
  # Items whose chunks are all final move, in order, to _ready. gRPC's
  # request thread (_Requests) takes them from there and builds each
  # request under _send only, so that a caller never waits for a request
  # being built; the stream thread (_run) reads confirmations. _send
  # guards _ready, _inflight, _pending and the stream's state. Lock order:
  # _lock, then _send.

  def __init__(self, client, num_keep_alive_refs, *, validate_items=True,
               max_in_flight_items=None, chunk_length=None,
               delta_encoded=False):
    if num_keep_alive_refs < 1:
      raise ValueError(
          f'num_keep_alive_refs ({num_keep_alive_refs}) must be a positive '
          'integer')
    if chunk_length is not None and not 1 <= chunk_length <= (
        num_keep_alive_refs):
      raise ValueError(
          f'chunk_length ({chunk_length}) must be None or in [1, '
          f'num_keep_alive_refs={num_keep_alive_refs}]')
    if max_in_flight_items is None:
      max_in_flight_items = DEFAULT_MAX_IN_FLIGHT_ITEMS
    if max_in_flight_items < 1:
      raise ValueError(
          f'max_in_flight_items ({max_in_flight_items}) must be >= 1')
    self._client = client
    self._keep = int(num_keep_alive_refs)
    self._chunk_length = chunk_length
    self._max_in_flight = int(max_in_flight_items)
    self._delta = bool(delta_encoded)
    self._validate = bool(validate_items)
    self._signatures = {}  # table -> flat specs, or None to skip
    self._insert_stream = client._channel.stream_stream(  # pylint: disable=protected-access
        _INSERT_STREAM,
        request_serializer=None,
        response_deserializer=reverb_service_pb2.InsertStreamResponse.FromString)

    self._lock = threading.Lock()
    # Guarded by _lock:
    self._episode_id, self._episode_varint = _keys.new_key_varint()
    self._table_fields = {}  # table name -> PrioritizedItem.table bytes
    self._history = None  # cached writer.history, rebuilt on new columns
    self._next_step = 0  # index of the next (or open) step in the episode
    self._step_open = False  # a partial step is being filled
    self._hist_len = 0
    self._columns = {}  # path -> _Column
    self._live = {}  # chunk key -> number of history cells in the chunk
    self._structure = None  # nest of None shaped like the appended data
    self._configs = {}  # path -> chunk length, for columns not seen yet
    self._seq = 0
    self._queue = collections.deque()  # items waiting for their chunks

    send_lock = threading.Lock()
    # _send signals changes to callers (confirmations, errors), _work the
    # sender (items to send). Both guard, with their lock:
    self._send = threading.Condition(send_lock)
    self._work = threading.Condition(send_lock)
    # Guarded by send_lock (read without it where a stale value is harmless):
    self._urgent = 0  # callers waiting for everything to be sent
    self._closed = False
    self._error = None  # sticky error
    self._last_transient = None
    self._ready = collections.deque()  # items to send, in creation order
    self._inflight = {}  # key -> item sent on the stream, unconfirmed
    self._pending = 0  # items created and not confirmed
    self._call = None
    self._stop = threading.Event()
    # The thread gRPC runs _Requests on (its latest), for release().
    self._request_thread = None
    # The thread that made the writer (an actor's, usually): the only one
    # on which a release waits for the flush (see _may_wait).
    self._owner = threading.get_ident()

    self._thread = threading.Thread(
        target=self._run, daemon=True, name='reverie-trajectory-writer')
    self._thread.start()

  # --- history -----------------------------------------------------------

  @property
  def history(self):
    """References to recent steps, structured like the appended data.

    ``writer.history['obs'][-3:]`` references the last three steps of
    column 'obs'. Raises RuntimeError before the first append.
    """
    history = self._history
    if history is not None:
      return history
    with self._lock:
      structure = self._structure
    if structure is None:
      raise RuntimeError(
          'history cannot be accessed before `append` is called at least '
          'once.')
    paths = [p for p, _ in _tree.flatten_with_path(structure)]
    history = _tree.unflatten_as(structure,
                                 [_ColumnHistory(self, p) for p in paths])
    with self._lock:
      if self._structure is structure:
        self._history = history
    return history

  @property
  def episode_steps(self) -> int:
    """Completed steps since the writer was made or the last end_episode
    (partial steps do not count until completed)."""
    with self._lock:
      return self._next_step

  @property
  def max_in_flight_items(self):
    return self._max_in_flight

  def configure(self, path, *, num_keep_alive_refs: int,
                max_chunk_length: Optional[int]):
    """Fixes the chunk length of one column (path: tuple of keys/indices).

    reverie keeps one history length for all columns, so
    ``num_keep_alive_refs`` must equal the writer's.
    """
    if num_keep_alive_refs != self._keep:
      raise NotImplementedError(
          'reverie does not support per-column num_keep_alive_refs; it must '
          f'equal the writer\'s ({self._keep})')
    if max_chunk_length is not None and not 1 <= max_chunk_length <= (
        num_keep_alive_refs):
      raise ValueError(
          f'max_chunk_length ({max_chunk_length}) must be None or a positive '
          f'integer <= num_keep_alive_refs ({num_keep_alive_refs})')
    path = tuple(path)
    with self._lock:
      col = self._columns.get(path)
      if col is None:
        self._configs[path] = max_chunk_length
      else:
        col.chunk_length = max_chunk_length

  # --- appending ---------------------------------------------------------

  def append(self, data, *, partial_step: bool = False):
    """Appends one step (or part of one, with ``partial_step``).

    Every leaf of ``data`` is a column; None leaves and absent fields are
    gaps. A column's dtype and shape are fixed by its first value; a
    mismatch, or an object array holding anything but bytes and str,
    raises ValueError (InvalidArgumentError), nothing of the step is
    appended and the writer stays usable. Values are copied. With ``partial_step=True`` the
    step stays open and the next append adds further columns to it (each
    column at most once per step).
    """
    flat = _tree.flatten_with_path(data)
    values = []
    for path, leaf in flat:
      if leaf is None:
        continue
      arr = encoding.as_array(leaf)
      if arr.dtype.kind == 'O':
        # Checked here, before anything is recorded, so that a bad value
        # fails this append alone rather than the chunk it would end up in
        # (and with it the writer).
        try:
          encoding.check_string_elements(arr)
        except errors.InvalidArgumentError as e:
          raise errors.InvalidArgumentError(
              f'Tensor of wrong dtype provided for column {path}: {e}') from e
      values.append((path, arr))
    with self._lock:
      self._check_usable()
      # Check everything before changing anything.
      columns = self._columns
      new_paths = []
      for path, arr in values:
        col = columns.get(path)
        if col is None:
          encoding.dtype_enum(arr.dtype)  # raises for unsupported dtypes
          new_paths.append(path)
        elif arr.dtype != col.dtype and not (
            arr.dtype.kind in 'SUO' and col.dtype.kind in 'SUO') and (
                encoding.native_dtype(arr.dtype) != col.dtype):
          raise errors.InvalidArgumentError(
              f'Tensor of wrong dtype provided for column {path}. Got '
              f'{arr.dtype} but expected {col.dtype}.')
        elif arr.shape != col.shape:
          raise errors.InvalidArgumentError(
              f'Tensor of incompatible shape provided for column {path}. Got '
              f'{list(arr.shape)} which is incompatible with '
              f'{list(col.shape)}.')
        elif self._step_open and col.refs and col.refs[-1] is not None:
          raise errors.InvalidArgumentError(
              f'Field {path} has already been set in the active step by '
              'previous (partial) append call and thus must be omitted or '
              'set to None')
      if self._next_step >= (1 << 31) - 1:
        raise errors.InvalidArgumentError(
            'episode has 2^31-1 steps, the most a sequence range can number')

      if not self._step_open:
        self._advance_locked()
      step = self._next_step
      if new_paths:
        by_path = dict(values)
        for path in new_paths:
          arr = by_path[path]
          # The column's dtype in the machine's byte order: a '>f4' step
          # and a '<f4' one are the same float32 column.
          col = _Column(path, encoding.native_dtype(arr.dtype), arr.shape,
                        self._keep, min(self._hist_len, self._keep))
          if path in self._configs:
            col.chunk_length = self._configs.pop(path)
          columns[path] = col
      if new_paths or self._structure is None:
        self._update_structure_locked(data, [p for p, _ in flat])
      live = self._live
      finalised = False
      for path, arr in values:
        col = columns[path]
        ch = col.open
        if ch is None:
          ch = col.open = _Chunk(_keys.new_key_varint(), col,
                                  self._episode_varint)
        cell = _Cell(ch, len(ch.rows))
        ch.rows.append(arr.copy())
        ch.steps.append(step)
        col.refs[-1] = cell
        live[ch.key] = live.get(ch.key, 0) + 1
        if len(ch.rows) >= self._chunk_length_locked(col):
          self._finalise_locked(col)
          finalised = True
      self._step_open = partial_step
      if not partial_step:
        self._next_step += 1
      if finalised:
        self._push_ready_locked()

  def _advance_locked(self):
    """Opens a new step: every column's history moves by one."""
    self._hist_len += 1
    keep = self._keep
    live = self._live
    for col in self._columns.values():
      refs = col.refs
      if len(refs) == keep:
        old = refs[0]
        if old is not None:
          old.live = False
          k = old.chunk.key
          n = live[k] - 1
          if n:
            live[k] = n
          else:
            del live[k]
      refs.append(None)

  def _update_structure_locked(self, data, paths):
    self._history = None
    if self._structure is None:
      self._structure = _tree.map_structure(lambda _: None, data)
      return
    known = {p for p, _ in _tree.flatten_with_path(self._structure)}
    if all(p in known for p in paths):
      return
    self._structure = _tree.union(
        self._structure, _tree.map_structure(lambda _: None, data))

  def _chunk_length_locked(self, col):
    if col.chunk_length is not None:
      return col.chunk_length
    if self._chunk_length is not None:
      return self._chunk_length
    if not col.item_lens:
      return 1
    n = -(-col.lens_sum // len(col.item_lens))  # the mean, rounded up
    return max(1, min(n, self._keep))

  def _finalise_locked(self, col):
    """Encodes the open chunk of col. Failures are sticky."""
    ch = col.open
    col.open = None
    try:
      arr = encoding.stack_rows(ch.rows)
      first, last = ch.steps[0], ch.steps[-1]
      ch.range = _wire.sequence_range(ch.episode, first, last,
                                      last - first + 1 != len(ch.steps))
      ch.delta = self._delta
      ch.array = arr
      if not encoding.encodes_without_error(arr):
        ch.encode()  # strings, or an error to raise here
    except errors.ReverieError as e:
      err = errors.InvalidArgumentError(
          f'trajectory writer: encoding column {col.path}: {e}')
      with self._send:
        self._error = err
        self._send.notify_all()
        self._work.notify_all()
      raise err from e
    ch.rows = None
    ch.final = True

  def _finalise_queued_locked(self, leave=0):
    """Finalises the open chunks the waiting items (but the last ``leave``)
    reference, and hands the items that became ready to the sender."""
    n = len(self._queue) - leave
    for i, it in enumerate(self._queue):
      if i >= n:
        break
      for ch in it.chunks:
        if not ch.final and ch.column.open is ch:
          self._finalise_locked(ch.column)
    self._push_ready_locked()

  def _push_ready_locked(self):
    """Moves the ready items at the front of _queue to _ready."""
    q = self._queue
    if not q or not q[0].ready():
      return
    ready = []
    while q and q[0].ready():
      ready.append(q.popleft())
    with self._send:
      self._ready.extend(ready)
      if len(self._ready) >= _COALESCE_ITEMS or self._urgent or (
          len(self._ready) == len(ready)):  # was empty: start the timer
        self._work.notify_all()

  # --- items ---------------------------------------------------------------

  def _table_specs(self, table):
    """Flat TensorSpecs of a table, None to skip validation."""
    if table in self._signatures:
      return self._signatures[table]
    try:
      signature = self._client._get_signature(  # pylint: disable=protected-access
          table, timeout=_SIGNATURE_TIMEOUT_S)
    except (errors.DeadlineExceededError, errors.ServerUnavailableError) as e:
      log.warning('trajectory writer: no signature of table %r (%s); its '
                  'items are not validated', table, e)
      self._signatures[table] = None
      return None
    flat = None if signature is None else specs.flatten(signature)
    self._signatures[table] = flat
    return flat

  def create_item(self, table: str, priority: float, trajectory):
    """Queues an item of ``table`` made of ``trajectory``, a nest of
    TrajectoryColumns (flattened in dm-tree order: dicts by sorted key).

    Returns once the item is queued; see flush(). Blocks while
    max_in_flight_items items are unconfirmed. Raises TypeError for leaves
    that are not TrajectoryColumns, ValueError (InvalidArgumentError) for
    expired references and, with validate_items, for items that do not
    match the table's signature or an unknown table.
    """
    flat = _tree.flatten(trajectory)
    if not flat:
      raise errors.InvalidArgumentError('create_item: empty trajectory')
    for i, col in enumerate(flat):
      if not isinstance(col, TrajectoryColumn):
        raise TypeError('All leaves of `trajectory` must be '
                        f'`TrajectoryColumn` but got {trajectory}')
      if not col._cells:  # pylint: disable=protected-access
        raise errors.InvalidArgumentError(
            f'create_item: trajectory column {i} is empty')
    priority = float(priority)
    if self._validate:
      self._check_signature(table, flat)
    while True:
      with self._lock:
        self._check_usable()
        with self._send:
          room = self._pending < self._max_in_flight
          if room:
            self._pending += 1
        if room:
          try:
            item = self._new_item_locked(table, priority, flat)
          except BaseException:
            with self._send:
              self._pending -= 1
              self._send.notify_all()
            raise
          self._queue.append(item)
          self._push_ready_locked()
          return
        # Let the waiting items leave, then wait for confirmations.
        self._finalise_queued_locked()
      with self._send:
        if self._pending >= self._max_in_flight and self._usable_send():
          self._urgent += 1
          self._work.notify_all()
          self._send.wait(1.0)
          self._urgent -= 1

  def _check_signature(self, table, flat):
    flat_specs = self._table_specs(table)
    if flat_specs is None:
      return
    if len(flat_specs) != len(flat):
      raise errors.InvalidArgumentError(
          f'Unable to create item in table \'{table}\' since the provided '
          f'trajectory has {len(flat)} columns but the table signature has '
          f'{len(flat_specs)}.')
    for i, (spec, col) in enumerate(zip(flat_specs, flat)):
      if not spec.is_compatible_with(col.dtype, col.shape):
        raise errors.InvalidArgumentError(
            f'Unable to create item in table \'{table}\' since the provided '
            f'trajectory is inconsistent with the table signature: column '
            f'{i} has dtype {col.dtype} and shape {list(col.shape)}, the '
            f'signature has {spec.dtype} {spec.shape}.')

  def _new_item_locked(self, table, priority, flat):
    columns = []
    chunks = []
    seen = set()
    lens = []
    for i, tc in enumerate(flat):
      cells = tc._cells  # pylint: disable=protected-access
      col = cells[0].chunk.column
      if self._columns.get(col.path) is not col:
        raise errors.InvalidArgumentError(
            f'create_item: trajectory column {i} comes from another writer')
      slices = []
      last = None  # [chunk, first row, count]
      for c in cells:
        if not c.live:
          raise errors.InvalidArgumentError(
              f'create_item: trajectory column {i} references a step of '
              f'column {col.path} that is no longer in the history')
        if c.chunk.column is not col:
          raise errors.InvalidArgumentError(
              f'create_item: trajectory column {i} mixes columns {col.path} '
              f'and {c.chunk.column.path}')
        if last is not None and c.chunk is last[0] and (
            c.row == last[1] + last[2]):
          last[2] += 1
        else:
          last = [c.chunk, c.row, 1]
          slices.append(last)
        if c.chunk.key not in seen:
          seen.add(c.chunk.key)
          chunks.append(c.chunk)
      if len(cells) == 1:  # one step, whose field the cell keeps
        fields = [cells[0].slice_field()]
      else:
        fields = [_wire.slice_field(ch.kv, row, n) for ch, row, n in slices]
      columns.append(_wire.column_of_fields(fields, tc.is_squeezed))
      lens.append((col, len(cells)))
    for col, n in lens:
      il = col.item_lens
      if len(il) == _AUTO_TUNE_ITEMS:
        col.lens_sum -= il[0]
      il.append(n)
      col.lens_sum += n
    key, key_varint = _keys.new_key_varint()
    table_field = self._table_fields.get(table)
    if table_field is None:
      table_field = self._table_fields[table] = _wire.table_field(table)
    data = _wire.prioritized_item(key_varint, table_field, priority,
                                  columns)
    self._seq += 1
    # The chunks the history references now: every chunk a later item can
    # reference is among them, or not sent yet (see _Requests).
    return _Item(self._seq, key, data, chunks, tuple(self._live))

  # --- waiting -------------------------------------------------------------

  def flush(self, block_until_num_items: int = 0,
            timeout_ms: Optional[int] = None):
    """Blocks until at most ``block_until_num_items`` items are pending.

    Pending items are those created but not yet confirmed by the server.
    The partial chunks referenced by all but the last
    ``block_until_num_items`` waiting items are finalised so that they can
    be sent.

    Raises:
      ValueError: if block_until_num_items < 0.
      DeadlineExceededError: if ``timeout_ms`` passed first (the items are
        still sent in the background); ServerUnavailableError (a subclass)
        if meanwhile the server could not be reached.
    """
    if block_until_num_items < 0:
      raise ValueError(
          f'block_until_num_items must be >= 0, got {block_until_num_items}')
    deadline = None
    if timeout_ms is not None and timeout_ms >= 0:
      deadline = time.monotonic() + timeout_ms / 1000
    self._flush(block_until_num_items, deadline, timeout_ms)

  def _flush(self, n, deadline, timeout_ms):
    while True:
      with self._lock:
        self._check_usable()
        self._finalise_queued_locked(leave=n)
      with self._send:
        self._check_usable()
        if self._pending <= n:
          return
        left = 1.0 if deadline is None else deadline - time.monotonic()
        if left > 0:
          self._urgent += 1
          self._work.notify_all()
          self._send.wait(min(left, 1.0))
          self._urgent -= 1
          continue
        what = (f'Flush call did not complete within provided timeout of '
                f'{timeout_ms} ms ({self._pending} items pending)')
        last = self._last_transient
      if last is not None:
        raise errors.ServerUnavailableError(
            f'{what}; the server is unavailable: {last.details}',
            code=last.code, details=last.details)
      raise errors.DeadlineExceededError(
          what, code=grpc.StatusCode.DEADLINE_EXCEEDED)

  def end_episode(self, clear_buffers: bool = True,
                  timeout_ms: Optional[int] = None):
    """Flushes every item, then starts a new episode (new episode id).

    With ``clear_buffers`` the histories are emptied; without, the last
    steps of the ended episode stay referenceable. On timeout the new
    episode is started all the same and DeadlineExceededError is raised;
    the items are still sent in the background.
    """
    deadline = None
    if timeout_ms is not None and timeout_ms >= 0:
      deadline = time.monotonic() + timeout_ms / 1000
    try:
      self._flush(0, deadline, timeout_ms)
    except errors.DeadlineExceededError:
      with self._lock:
        self._new_episode_locked(clear_buffers)
      raise
    with self._lock:
      self._new_episode_locked(clear_buffers)

  def _new_episode_locked(self, clear_buffers):
    # Items created after the flush may still reference open chunks:
    # finalise those first.
    self._finalise_queued_locked()
    for col in self._columns.values():
      if col.open is not None:
        if clear_buffers:
          col.open = None  # only the history references it
        else:
          self._finalise_locked(col)
      if clear_buffers:
        for c in col.refs:
          if c is not None:
            c.live = False
        col.refs.clear()
    if clear_buffers:
      self._hist_len = 0
      self._live.clear()
    self._step_open = False
    self._next_step = 0
    self._episode_id, self._episode_varint = _keys.new_key_varint()

  def close(self, timeout=10.0):
    """Stops the background thread and cancels the stream. Unconfirmed
    items are dropped (flush first to keep them). Idempotent."""
    with self._send:
      if self._closed:
        return
      self._closed = True
      call = self._call
      self._send.notify_all()
      self._work.notify_all()
    self._stop.set()
    if call is not None:
      call.cancel()
    if self._thread is not threading.current_thread():
      self._thread.join(timeout)
    with self._lock:
      self._queue.clear()
    with self._send:
      self._ready.clear()
      self._inflight.clear()

  def release(self, timeout_ms):
    """What becomes of a writer dropped without close(): its pending items
    are flushed for up to ``timeout_ms`` (those still unconfirmed then are
    logged and dropped), then it is closed. Runs wherever the writer is
    collected: on any thread but the one that made the writer, or on that
    one inside the writer's locks, it carries on in a thread of its own
    (a collection can run on gRPC's channel thread, which must deliver
    the very confirmations the flush waits for: waiting there stalled
    every stream of the client for the whole timeout); while the
    interpreter shuts down it only closes (the sender threads no longer
    run)."""
    if self._closed:
      return
    if sys.is_finalizing():
      self.close(timeout=0)
      return
    if not self._may_wait():
      threading.Thread(target=self._release_now, args=(timeout_ms,), daemon=True,
                       name='reverie-trajectory-writer-release').start()
      return
    self._release_now(timeout_ms)

  def _release_now(self, timeout_ms):
    """release's flush and close, on a thread that may wait for them."""
    try:
      self.flush(timeout_ms=timeout_ms)
    except errors.ClosedError:
      pass
    except Exception as e:  # pylint: disable=broad-except
      with self._send:
        lost = self._pending
      if lost:
        log.error('reverie trajectory writer dropped without close(): its '
                  'flush (of up to %d ms) failed and %d unconfirmed items '
                  'are lost: %s', timeout_ms, lost, e)
    finally:
      self.close(timeout=_RELEASE_JOIN_S)

  def _may_wait(self):
    """Whether the calling thread may wait for this writer: the thread
    that made it (no thread of the writer's or of gRPC's), holding none
    of its locks (a lock that stays busy for _LOCK_PROBE_S counts as
    held)."""
    me = threading.get_ident()
    if me != self._owner or me == self._thread.ident or me == self._request_thread:
      return False
    for lock in (self._lock, self._send):
      if not lock.acquire(timeout=_LOCK_PROBE_S):
        return False
      lock.release()
    return True

  def _check_usable(self):
    if self._closed:
      raise errors.ClosedError('the trajectory writer is closed')
    err = self._error
    if err is not None:
      raise err

  def _usable_send(self):
    return not self._closed and self._error is None

  # --- the background stream -------------------------------------------

  def _run(self):
    try:
      self._run_streams()
    except BaseException as e:  # pylint: disable=broad-except
      # Anything else that ends the thread (gRPC refuses to start a call on
      # a closed channel with ValueError) must reach the caller: without a
      # sticky error, flush and create_item would wait for a thread that
      # is gone.
      if self._client.closed:
        err = errors.ClosedError('trajectory writer: the client was closed')
      elif isinstance(e, errors.ReverieError):
        err = e
      else:
        err = errors.ReverieError(f'trajectory writer: the sender failed: {e!r}')
      if err is not e:
        err.__cause__ = e
      with self._send:
        if self._error is None:
          self._error = err
        self._send.notify_all()
        self._work.notify_all()

  def _run_streams(self):
    backoff = _MIN_BACKOFF_S
    while True:
      with self._send:
        while not self._closed and not self._ready:
          self._work.wait()
        if self._closed:
          return
      start = time.monotonic()
      err = self._stream()
      with self._send:
        if self._closed:
          return
        if self._client.closed and errors.is_transient(err):
          err = errors.ClosedError('trajectory writer: the client was closed')
        if not errors.is_transient(err):
          self._error = err
          self._send.notify_all()
          self._work.notify_all()
          return
        self._last_transient = err
        if self._inflight:
          back = sorted(self._inflight.values(), key=lambda it: it.seq)
          self._inflight.clear()
          self._ready.extendleft(reversed(back))
        unconfirmed = self._pending
        self._send.notify_all()
      if time.monotonic() - start >= _BACKOFF_RESET_S:
        backoff = _MIN_BACKOFF_S
      log.warning('reverie trajectory writer: insert stream failed (%s); '
                  'reconnecting in %.3fs with %d unconfirmed items', err,
                  backoff, unconfirmed)
      if self._stop.wait(backoff):
        return
      backoff = min(2 * backoff, _MAX_BACKOFF_S)

  def _stream(self):
    """Runs one insert stream until it fails; returns the error."""
    state = _StreamState()
    # The first attempt fails fast when the server is unreachable, so that
    # flush can tell; after a failure the next stream waits for the
    # connection instead (some gRPC versions otherwise keep failing
    # fast-fail calls long after the server is back).
    call = self._insert_stream(_Requests(self, state),
                               wait_for_ready=self._last_transient is not None)
    with self._send:
      if self._closed:
        call.cancel()
        return errors.ClosedError('trajectory writer closed')
      self._call = call
    try:
      for resp in call:
        self._confirm(resp.keys)
      return errors.ServerUnavailableError(
          'insert stream ended by the server', code=grpc.StatusCode.UNAVAILABLE)
    except grpc.RpcError as e:
      return errors.from_rpc_error(e, 'trajectory writer')
    finally:
      with self._send:
        state.done = True
        self._call = None
        self._send.notify_all()
        self._work.notify_all()
      call.cancel()

  def _confirm(self, keys):
    with self._send:
      inflight = self._inflight
      n = len(inflight)
      for k in keys:
        inflight.pop(k, None)
      done = n - len(inflight)
      if done:
        self._pending -= done
        self._last_transient = None
        self._send.notify_all()


class TrajectoryWriter:
  """Writes trajectories to a table, as ``reverb.TrajectoryWriter``.

  Make one with ``client.trajectory_writer(num_keep_alive_refs)``; use it as
  a context manager (which flushes on a clean exit and closes) or call
  :meth:`close`. Methods are safe to call from several threads, although
  an episode's steps normally come from one.

  ``create_item`` does not wait for the server; at most
  ``max_in_flight_items`` items may be created and not yet confirmed, after
  which it blocks until the server confirms one (finalising waiting chunks
  first), so a slow server slows the writer down instead of growing its
  memory.

  A writer dropped without close() is collected like any object: it then
  flushes its pending items for up to ``RELEASE_TIMEOUT_MS`` (10 s; items
  still unconfirmed are logged as lost) and closes its stream and thread.
  dm-reverb's writer closes without flushing when it is deleted. Nothing
  is flushed at interpreter exit: close (or flush) writers before.
  """

  def __init__(self, client, num_keep_alive_refs, *, validate_items=True,
               max_in_flight_items=None, chunk_length=None,
               delta_encoded=False):
    core = self._core = _WriterCore(
        client, num_keep_alive_refs, validate_items=validate_items,
        max_in_flight_items=max_in_flight_items, chunk_length=chunk_length,
        delta_encoded=delta_encoded)
    # Holds the core only, so that it does not keep this writer alive.
    self._release = weakref.finalize(self, core.release, RELEASE_TIMEOUT_MS)
    self._release.atexit = False

  def __enter__(self):
    return self

  def __exit__(self, exc_type, exc_value, tb):
    # As dm-reverb's writer: the items created in the block are flushed
    # even when it raised, unless what it raised came from reverie itself
    # (the writer or its server failed, so a flush would fail too). A
    # flush that fails while another exception propagates is logged, so
    # that the block's own exception is the one the caller sees.
    try:
      if exc_type is None:
        self.flush()
      elif not issubclass(exc_type, errors.ReverieError):
        try:
          self.flush()
        except Exception as e:  # pylint: disable=broad-except
          log.warning('reverie trajectory writer: could not flush the items '
                      'of a block that raised %s: %s', exc_type.__name__, e)
    finally:
      self.close()

  @property
  def history(self):
    return self._core.history

  @property
  def episode_steps(self) -> int:
    return self._core.episode_steps

  @property
  def max_in_flight_items(self):
    return self._core.max_in_flight_items

  def configure(self, path, *, num_keep_alive_refs: int,
                max_chunk_length: Optional[int]):
    self._core.configure(path, num_keep_alive_refs=num_keep_alive_refs,
                         max_chunk_length=max_chunk_length)

  def append(self, data, *, partial_step: bool = False):
    self._core.append(data, partial_step=partial_step)

  def create_item(self, table: str, priority: float, trajectory):
    self._core.create_item(table, priority, trajectory)

  def flush(self, block_until_num_items: int = 0,
            timeout_ms: Optional[int] = None):
    self._core.flush(block_until_num_items, timeout_ms)

  def end_episode(self, clear_buffers: bool = True,
                  timeout_ms: Optional[int] = None):
    self._core.end_episode(clear_buffers, timeout_ms)

  def close(self, timeout=10.0):
    self._core.close(timeout)


for _name in ('configure', 'append', 'create_item', 'flush', 'end_episode',
              'close'):
  getattr(TrajectoryWriter, _name).__doc__ = getattr(_WriterCore,
                                                     _name).__doc__
for _name in ('history', 'episode_steps', 'max_in_flight_items'):
  setattr(TrajectoryWriter, _name, property(
      getattr(TrajectoryWriter, _name).fget,
      doc=getattr(_WriterCore, _name).__doc__))
del _name


class _StreamState:
  __slots__ = ('sent', 'done')

  def __init__(self):
    self.sent = set()  # chunk keys the server holds for this stream
    self.done = False


class _Requests:
  """The request iterator of one insert stream, run by gRPC's thread.

  Each request holds the ready items (up to _MAX_REQUEST_BYTES with their
  chunks), the chunks they reference that were not sent on this stream
  yet, and keep_chunk_keys: the sent chunks that the history referenced
  when the last of the items was created. That is every sent chunk a
  later item can reference: such an item references steps that were in
  the history then (steps leave the history for good), or newer ones,
  whose chunks have not been sent.
  """

  def __init__(self, writer, state):
    self._w = writer
    self._state = state

  def __iter__(self):
    return self

  def __next__(self):
    w = self._w
    w._request_thread = threading.get_ident()  # pylint: disable=protected-access
    state = self._state
    cond = w._work  # pylint: disable=protected-access
    with cond:
      ready = w._ready  # pylint: disable=protected-access
      since = None
      while True:
        if state.done or w._closed:  # pylint: disable=protected-access
          raise StopIteration
        if not ready:
          cond.wait()
          continue
        if len(ready) >= _COALESCE_ITEMS or w._urgent:  # pylint: disable=protected-access
          break
        now = time.monotonic()
        if since is None:
          since = now
        elif now - since >= _COALESCE_S:
          break
        cond.wait(_COALESCE_S - (now - since))
      items = []
      chunks = []
      size = 0
      sent = state.sent  # only this iterator's thread uses it
      inflight = w._inflight  # pylint: disable=protected-access
      while ready and size < _MAX_REQUEST_BYTES:
        it = ready.popleft()
        items.append(it)
        inflight[it.key] = it
        size += len(it.data)
        for ch in it.chunks:
          if ch.key not in sent:
            sent.add(ch.key)
            chunks.append(ch)
            size += ch.size()
    # Encoded outside the lock: the chunks' and items' bytes never change.
    keep = sent.intersection(items[-1].keep)
    state.sent = keep
    return _wire.insert_request([ch.encode() for ch in chunks],
                                [it.data for it in items], sorted(keep))
