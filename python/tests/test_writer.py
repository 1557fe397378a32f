"""TrajectoryWriter: history references, trajectories across chunks, partial
steps, episodes, flush timeouts, validation, sticky errors, reconnects."""

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import reverie
import reverie.writer

from conftest import free_port

ALL_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16,
              np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.bool_, np.complex64, np.complex128]


def _sample(client, table, n, **kwargs):
  return [s.data for s in client.sample(table, n, emit_timesteps=False,
                                        timeout=10, **kwargs)]


def _step(i):
  return {'obs': np.full((2, 3), i, np.float32), 'act': np.int64(i)}


@pytest.mark.parametrize('chunk_length', [1, 2, 3, None])
@pytest.mark.parametrize('delta', [False, True])
def test_trajectories_across_chunks(client, reset, chunk_length, delta):
  reset('queue')
  with client.trajectory_writer(6, chunk_length=chunk_length,
                                delta_encoded=delta) as w:
    for i in range(12):
      w.append(_step(i))
      if i >= 4:
        w.create_item('queue', 1.0, {
            'obs': w.history['obs'][-5:],
            'act': w.history['act'][-5:],
            'last': w.history['act'][-1],
        })
  samples = _sample(client, 'queue', 8)
  for i, data in zip(range(4, 12), samples):
    act, last, obs = data  # sorted keys
    np.testing.assert_array_equal(act, np.arange(i - 4, i + 1))
    assert act.dtype == np.int64
    assert obs.shape == (5, 2, 3) and obs.dtype == np.float32
    np.testing.assert_array_equal(obs[:, 0, 0], np.arange(i - 4, i + 1))
    assert last.shape == () and last == i


def test_every_dtype_through_the_writer(client, reset):
  reset('queue')
  steps = []
  with client.trajectory_writer(3, chunk_length=3) as w:
    for i in range(5):
      step = {}
      for j, t in enumerate(ALL_DTYPES):
        v = (np.arange(4) * (i + 1) + j).astype(t).reshape(2, 2)
        step[f'{j:02d}_{np.dtype(t).name}'] = v
      step['zz_bytes'] = np.array([b'a\x00' * i, b''], dtype=object)
      step['zz_str'] = 'step %d' % i
      steps.append(step)
      w.append(step)
      if i >= 2:
        w.create_item('queue', 1.0,
                      {k: h[-3:] for k, h in w.history.items()})
  keys = sorted(steps[0])
  for i, data in zip(range(2, 5), _sample(client, 'queue', 3)):
    assert len(data) == len(keys)
    for k, got in zip(keys[:-2], data[:-2]):
      want = np.stack([steps[j][k] for j in range(i - 2, i + 1)])
      assert got.dtype == want.dtype, k
      np.testing.assert_array_equal(got, want)
    assert data[-2].dtype == object and data[-2].tolist() == [
        [b'a\x00' * j, b''] for j in range(i - 2, i + 1)]
    assert data[-1].tolist() == [b'step %d' % j for j in range(i - 2, i + 1)]


def test_history_indexing(client, reset):
  reset('queue')
  w = client.trajectory_writer(3)
  with pytest.raises(RuntimeError):
    _ = w.history
  for i in range(5):
    w.append({'x': np.int32(i)})
  h = w.history['x']
  assert len(h) == 5  # steps in the episode; the last 3 are referenceable
  assert h[-1].shape == () and h[-1].is_squeezed
  assert h[-2:].shape == (2,) and not h[-2:].is_squeezed
  assert h[[2, 4]].shape == (2,)
  np.testing.assert_array_equal(h[2:].numpy(), [2, 3, 4])
  np.testing.assert_array_equal(h[2::2].numpy(), [2, 4])
  np.testing.assert_array_equal(h[-3:][::2][1:].numpy(), [4])
  assert h[4].numpy() == 4 and h[-3].numpy() == 2
  assert h[-1].dtype == np.int32
  with pytest.raises(ValueError):
    _ = h[1]  # no longer kept alive
  with pytest.raises(ValueError):
    _ = h[:]  # includes expired steps
  with pytest.raises(IndexError):
    _ = h[5]
  with pytest.raises(IndexError):
    _ = h[-6]
  with pytest.raises(TypeError):
    _ = h['a']
  col = h[-3:]
  np.testing.assert_array_equal(col[1:].numpy(), [3, 4])
  assert col[0].is_squeezed
  w.create_item('queue', 1.0, [h[-3:], h[-1]])
  w.flush(timeout_ms=10000)
  (data,) = _sample(client, 'queue', 1)
  np.testing.assert_array_equal(data[0], [2, 3, 4])
  assert data[1] == 4 and data[1].shape == ()
  w.close()


def test_expired_reference_rejected_at_create_item(client, reset):
  reset('queue')
  with client.trajectory_writer(2) as w:
    w.append({'x': 1})
    first = w.history['x'][-1]
    w.append({'x': 2})
    w.append({'x': 3})
    with pytest.raises(ValueError, match='no longer in the history'):
      w.create_item('queue', 1.0, first)
    with pytest.raises(TypeError):
      w.create_item('queue', 1.0, {'x': np.int32(1)})


def test_partial_steps_and_new_columns(client, reset):
  reset('queue')
  with client.trajectory_writer(4) as w:
    w.append({'obs': np.float32(0)}, partial_step=True)
    assert w.episode_steps == 0
    w.append({'act': np.int32(10)})
    assert w.episode_steps == 1
    w.append({'obs': np.float32(1)}, partial_step=True)
    with pytest.raises(ValueError, match='already been set'):
      w.append({'obs': np.float32(9)})
    w.append({'act': np.int32(11), 'extra': b'new'})
    assert w.episode_steps == 2
    h = w.history
    assert set(h) == {'obs', 'act', 'extra'}
    with pytest.raises(ValueError):  # 'extra' did not exist at step 0
      _ = h['extra'][0]
    w.create_item('queue', 1.0, (h['obs'][-2:], h['act'][-2:],
                                 h['extra'][-1]))
  (data,) = _sample(client, 'queue', 1)
  np.testing.assert_array_equal(data[0], [0, 1])
  np.testing.assert_array_equal(data[1], [10, 11])
  assert data[2].item() == b'new'


def test_dtype_and_shape_are_fixed_per_column(client):
  with client.trajectory_writer(2) as w:
    w.append({'x': np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match='dtype'):
      w.append({'x': np.zeros(3, np.float64)})
    with pytest.raises(ValueError, match='shape'):
      w.append({'x': np.zeros(4, np.float32)})
    assert w.episode_steps == 1


def test_byte_order_is_not_part_of_the_dtype(client, reset):
  # Steps of one column may come in either byte order (big-endian data
  # read from a file, say): they are the same dtype, checked against the
  # table's signature as such, and sampled in the machine's byte order.
  reset('queue', 'sig')
  with client.trajectory_writer(2) as w:
    w.append({'x': np.array([1, 2], '<i8')})
    w.append({'x': np.array([3, 4], '>i8')})
    assert w.history['x'][-1].dtype == np.int64
    w.create_item('queue', 1.0, {'x': w.history['x'][:]})
  with client.trajectory_writer(1) as w:
    w.append({'obs': np.arange(6, dtype='>f4').reshape(3, 2),
              'action': np.arange(2, dtype='>i8'), 'reward': np.float32(1)})
    h = w.history
    w.create_item('sig', 1.0, {'obs': h['obs'][-1], 'action':
                               h['action'][-1], 'reward': h['reward'][-1]})
  ((x,),) = _sample(client, 'queue', 1)
  assert x.dtype == np.int64
  np.testing.assert_array_equal(x, [[1, 2], [3, 4]])
  (s,) = list(client.sample('sig', 1, emit_timesteps=False,
                            unpack_as_table_signature=True, timeout=10))
  assert s.data['obs'].dtype == np.float32
  np.testing.assert_array_equal(s.data['obs'], np.arange(6).reshape(3, 2))
  np.testing.assert_array_equal(s.data['action'], [0, 1])
  assert reverie.TensorSpec((2,), np.dtype('<f4')).is_compatible_with(
      np.dtype('>f4'), (2,))


def test_bad_string_values_fail_their_append_only(client, reset):
  # Numeric chunks are compressed by the sender when first sent. Values of
  # object arrays are checked at append, before anything of the step is
  # recorded: a bad one (an int among bytes) fails that append, naming
  # its column, and the writer goes on as dm-reverb's does.
  reset('queue')
  with client.trajectory_writer(2, validate_items=False) as w:
    w.append({'x': np.zeros(3, np.float32)})
    chunk = w.history['x'][-1]._cells[0].chunk  # pylint: disable=protected-access
    assert chunk.final and chunk.data is None  # no item has sent it yet
    bad = np.array([b'a', 3], dtype=object)
    with pytest.raises(ValueError, match=r"\('s',\).*int is neither bytes"):
      w.append({'x': np.ones(3, np.float32), 's': bad})  # a new column
    w.append({'x': np.ones(3, np.float32),
              's': np.array([b'a', 'b'], dtype=object)})
    with pytest.raises(ValueError, match=r"\('s',\).*NoneType is neither"):
      w.append({'x': np.ones(3, np.float32),
                's': np.array([b'c', None], dtype=object)})
    with pytest.raises(ValueError, match='float is neither bytes nor str'):
      w.append({'t': np.array(0.5, dtype=object)})
    assert w.episode_steps == 2
    w.append({'x': np.full(3, 2, np.float32),
              's': np.array([b'c', b'd'], dtype=object)})
    w.create_item('queue', 1.0, {'x': w.history['x'][-2:],
                                 's': w.history['s'][-2:]})
    w.flush(timeout_ms=10000)
  ((s, x),) = _sample(client, 'queue', 1)
  assert s.tolist() == [[b'a', b'b'], [b'c', b'd']]
  np.testing.assert_array_equal(x[:, 0], [1, 2])


def test_numpy_returns_a_copy(client, reset):
  # As dm-reverb's: numpy() is a copy, so changing it in place (as a
  # priority function might) changes nothing the writer sends. Step 0 is
  # read while its chunk is open, step 1 once the chunk is finalised.
  reset('queue')
  with client.trajectory_writer(2, chunk_length=2) as w:
    w.append({'x': np.zeros(3, np.int64)})
    v = w.history['x'][-1].numpy()
    v += 7
    w.append({'x': np.ones(3, np.int64)})
    for col in (w.history['x'][0], w.history['x'][-1], w.history['x'][:]):
      v = col.numpy()
      v += 7
    np.testing.assert_array_equal(w.history['x'][:].numpy(),
                                  [[0, 0, 0], [1, 1, 1]])
    w.create_item('queue', 1.0, {'x': w.history['x'][:],
                                 'last': w.history['x'][-1]})
  ((last, x),) = _sample(client, 'queue', 1)
  np.testing.assert_array_equal(x, [[0, 0, 0], [1, 1, 1]])
  np.testing.assert_array_equal(last, [1, 1, 1])


def test_end_episode(client, reset):
  reset('queue')
  with client.trajectory_writer(4) as w:
    for i in range(3):
      w.append({'x': np.int64(i)})
    w.end_episode(clear_buffers=False, timeout_ms=10000)
    assert w.episode_steps == 0
    w.append({'x': np.int64(100)})
    # Without clearing, items may span the episode boundary.
    w.create_item('queue', 1.0, w.history['x'][-3:])
    w.end_episode(timeout_ms=10000)
    with pytest.raises(IndexError):
      _ = w.history['x'][-1]
    w.append({'x': np.int64(200)})
    w.create_item('queue', 1.0, w.history['x'][:])
  d1, d2 = _sample(client, 'queue', 2)
  np.testing.assert_array_equal(d1[0], [1, 2, 100])
  np.testing.assert_array_equal(d2[0], [200])


def test_flush_timeout(client, reset):
  reset('queue_block')
  w = client.trajectory_writer(1)
  for i in range(3):
    w.append({'x': np.int32(i)})
    w.create_item('queue_block', 1.0, w.history['x'][-1])
  # The queue holds 2 items: the third waits for a sample.
  start = time.monotonic()
  with pytest.raises(reverie.DeadlineExceededError) as e:
    w.flush(timeout_ms=300)
  assert not isinstance(e.value, reverie.ServerUnavailableError)
  assert 0.25 <= time.monotonic() - start < 5
  w.flush(block_until_num_items=1, timeout_ms=5000)
  with pytest.raises(reverie.DeadlineExceededError):
    w.end_episode(timeout_ms=200)
  assert w.episode_steps == 0  # the episode was reset all the same
  assert [int(d[0]) for d in _sample(client, 'queue_block', 1)] == [0]
  w.flush(timeout_ms=10000)
  assert [int(d[0]) for d in _sample(client, 'queue_block', 2)] == [1, 2]
  w.close()
  with pytest.raises(ValueError):
    w.flush(-1)


def test_max_in_flight_items_blocks_create_item(client, reset):
  reset('queue_block')
  w = client.trajectory_writer(1, max_in_flight_items=2)
  for i in range(4):  # 2 go into the queue, 2 stay unconfirmed
    w.append({'x': np.int32(i)})
    w.create_item('queue_block', 1.0, w.history['x'][-1])
  deadline = time.monotonic() + 10
  while client.server_info(timeout=10)['queue_block'].current_size < 2:
    assert time.monotonic() < deadline
    time.sleep(0.01)
  w.append({'x': np.int32(4)})
  done = threading.Event()

  def create():
    w.create_item('queue_block', 1.0, w.history['x'][-1])
    done.set()

  t = threading.Thread(target=create, daemon=True)
  t.start()
  assert not done.wait(0.3)  # 2 items unconfirmed: blocked
  assert [int(d[0]) for d in _sample(client, 'queue_block', 1)] == [0]
  assert done.wait(10)
  got = [int(d[0]) for d in _sample(client, 'queue_block', 4)]
  assert got == [1, 2, 3, 4]
  w.flush(timeout_ms=10000)
  w.close()


def test_request_size_counts_chunks(client, reset, monkeypatch):
  """A request closes once its chunks and items reach the writer's limit:
  past it by one item at most, as a gRPC-Go server holds it whole."""
  reset('queue')
  limit = 1 << 20
  monkeypatch.setattr(reverie.writer, '_MAX_REQUEST_BYTES', limit)
  sizes = []
  build = reverie._wire.insert_request

  def record(chunks, items, keep):
    req = build(chunks, items, keep)
    sizes.append((len(req), len(items)))
    return req

  monkeypatch.setattr(reverie._wire, 'insert_request', record)
  x = np.random.default_rng(1).random(64 << 10, dtype=np.float32)  # 256 KiB
  n = 40
  # All steps first, then the items in a tight loop, so that items are
  # ready faster than requests go out.
  with client.trajectory_writer(n, max_in_flight_items=n) as w:
    for _ in range(n):
      w.append({'x': x})
    for i in range(n):
      w.create_item('queue', 1.0, w.history['x'][i])
    w.flush(timeout_ms=10000)
  assert sum(k for _, k in sizes) == n
  item = len(x.tobytes()) + (1 << 10)
  for size, k in sizes:
    assert size <= limit + item, (size, k, sizes)
  assert len(sizes) < n, sizes  # items were still batched


def test_unknown_table_is_a_sticky_error(client):
  w = client.trajectory_writer(1, validate_items=False)
  w.append({'x': np.int32(1)})
  w.create_item('no_such_table', 1.0, w.history['x'][-1])
  with pytest.raises(reverie.TableNotFoundError, match='no_such_table'):
    w.flush(timeout_ms=10000)
  with pytest.raises(reverie.TableNotFoundError):
    w.append({'x': np.int32(2)})
  w.close()


def test_validate_items(client, reset):
  reset('sig')
  with client.trajectory_writer(2) as w:
    w.append({'obs': np.zeros((3, 2), np.float32),
              'action': np.arange(4), 'reward': np.float32(1)})
    h = w.history
    with pytest.raises(reverie.InvalidArgumentError, match='Could not find'):
      w.create_item('no_such_table', 1.0, h['obs'][-1])
    with pytest.raises(ValueError, match='columns'):
      w.create_item('sig', 1.0, [h['obs'][-1]])
    with pytest.raises(ValueError, match='inconsistent'):
      # obs must be squeezed to [3, 2]
      w.create_item('sig', 1.0, {'obs': h['obs'][-1:], 'action':
                                 h['action'][-1], 'reward': h['reward'][-1]})
    w.create_item('sig', 1.0, {'obs': h['obs'][-1], 'action':
                               h['action'][-1], 'reward': h['reward'][-1]})
  (s,) = list(client.sample('sig', 1, emit_timesteps=False,
                            unpack_as_table_signature=True, timeout=10))
  assert set(s.data) == {'obs', 'action', 'reward'}
  np.testing.assert_array_equal(s.data['action'], np.arange(4))


def test_closed_writer(client):
  w = client.trajectory_writer(1)
  w.close()
  w.close()
  with pytest.raises(reverie.ClosedError):
    w.append({'x': 1})
  with pytest.raises(reverie.ClosedError):
    w.flush()


def test_writer_of_a_closed_client(address):
  # The writer has no stream yet when its client is closed: its sender
  # cannot start one, and flush must say so instead of waiting for it.
  c = reverie.Client(address)
  w = c.trajectory_writer(1, validate_items=False)
  c.close()
  w.append({'x': np.int32(1)})
  w.create_item('queue', 1.0, w.history['x'][-1])
  start = time.monotonic()
  with pytest.raises(reverie.ClosedError):
    w.flush(timeout_ms=5000)
  assert time.monotonic() - start < 4
  with pytest.raises(reverie.ClosedError):
    w.append({'x': np.int32(2)})
  w.close()


def _writer_threads():
  return sum(t.name == 'reverie-trajectory-writer' and t.is_alive()
             for t in threading.enumerate())


def test_dropped_writers_are_collected(client, reset):
  # A writer dropped without close() is collected: its pending item (its
  # chunk still open, so only a flush sends it) is flushed, and its
  # thread and stream end. Its background threads must not keep it alive.
  reset('queue')
  before = _writer_threads()
  refs = []
  for i in range(30):
    w = client.trajectory_writer(2, chunk_length=2)
    w.append({'x': np.int64(i)})
    w.create_item('queue', 1.0, w.history['x'][-1])
    refs.append(weakref.ref(w))
    del w
  gc.collect()
  assert sum(r() is not None for r in refs) == 0
  deadline = time.monotonic() + 10
  while _writer_threads() > before and time.monotonic() < deadline:
    time.sleep(0.05)
  assert _writer_threads() <= before
  assert client.server_info(timeout=10)['queue'].current_size == 30
  assert sorted(int(d[0]) for d in _sample(client, 'queue', 30)) == list(
      range(30))


def _wait_closed(core, timeout=10):
  """Waits for a released writer's core to close (its release carries on
  in a thread of its own)."""
  deadline = time.monotonic() + timeout
  while not core._closed and time.monotonic() < deadline:  # pylint: disable=protected-access
    time.sleep(0.05)
  assert core._closed  # pylint: disable=protected-access


def test_release_where_it_cannot_wait_carries_on_in_a_thread(client, reset):
  # A collection runs the release wherever it happens, possibly on a
  # thread inside the writer's own lock: there it must not wait for the
  # writer (a deadlock), but hand the flush and close to a thread.
  reset('queue')
  w = client.trajectory_writer(2, chunk_length=2)
  w.append({'x': np.int64(7)})
  w.create_item('queue', 1.0, w.history['x'][-1])
  core = w._core  # pylint: disable=protected-access
  with core._lock:  # pylint: disable=protected-access
    start = time.monotonic()
    w._release()  # pylint: disable=protected-access
    assert time.monotonic() - start < 5
    assert not core._closed  # pylint: disable=protected-access
  _wait_closed(core)
  assert [int(d[0]) for d in _sample(client, 'queue', 1)] == [7]


def test_release_off_the_owner_thread_does_not_wait(client, reset):
  # A collection can run on any thread, gRPC's channel thread among them,
  # which delivers the confirmations a flush waits for: a release there
  # waited out its whole timeout and stalled every stream of the client.
  # Off the thread that made the writer it hands the flush to a thread.
  reset('queue')
  w = client.trajectory_writer(2, chunk_length=2)
  w.append({'x': np.int64(9)})
  w.create_item('queue', 1.0, w.history['x'][-1])
  core = w._core  # pylint: disable=protected-access
  took = []

  def release():
    start = time.monotonic()
    w._release()  # pylint: disable=protected-access
    took.append(time.monotonic() - start)

  # On gRPC's channel thread, as a collection may run it: a future's
  # done-callback runs there.
  from reverie._proto.deepmind.reverb import reverb_service_pb2 as pb  # pylint: disable=import-outside-toplevel
  fut = client._stub.ServerInfo.future(pb.ServerInfoRequest())  # pylint: disable=protected-access
  done = threading.Event()
  fut.add_done_callback(lambda _: (release(), done.set()))
  assert done.wait(20)
  assert took and took[0] < 1, took
  _wait_closed(core)
  assert [int(d[0]) for d in _sample(client, 'queue', 1)] == [9]


def test_block_that_raises_still_flushes(client, reset):
  # As dm-reverb's: a with-block that raises (here, as if the environment
  # failed) still flushes the items it created, and its own exception is
  # the one that propagates.
  reset('queue')
  with pytest.raises(RuntimeError, match='environment'):
    with client.trajectory_writer(1) as w:
      for i in range(5):
        w.append({'x': np.int32(i)})
        w.create_item('queue', 1.0, w.history['x'][-1])
      raise RuntimeError('environment failed')
  assert client.server_info(timeout=10)['queue'].current_size == 5
  assert [int(d[0]) for d in _sample(client, 'queue', 5)] == list(range(5))


@pytest.mark.reverie_only
def test_reconnect_resends_unconfirmed_items(own_reverie):
  port = free_port()
  srv = own_reverie(listen=f'127.0.0.1:{port}')
  c = reverie.Client(srv.address)
  w = c.trajectory_writer(2, validate_items=False)
  w.append({'x': np.int32(0)})
  w.create_item('queue', 1.0, w.history['x'][-1])
  w.flush(timeout_ms=10000)
  srv.stop()  # the server goes away with item 0

  for i in range(1, 4):
    w.append({'x': np.int32(i)})
    w.create_item('queue', 1.0, w.history['x'][-2:])
  with pytest.raises(reverie.ServerUnavailableError) as e:
    w.flush(timeout_ms=500)
  assert isinstance(e.value, reverie.DeadlineExceededError)

  own_reverie(listen=f'127.0.0.1:{port}')  # a new, empty server
  w.flush(timeout_ms=20000)
  got = [d[0].tolist() for d in
         _sample_from(c, 'queue', 3)]
  assert got == [[0, 1], [1, 2], [2, 3]]
  w.close()
  c.close()


def _sample_from(client, table, n):
  return [s.data for s in client.sample(table, n, emit_timesteps=False,
                                        timeout=10)]
