"""Datasets: batches, structure, exact sample counts, rate limiter timeouts,
several workers, errors, closing; and the torch/JAX helpers."""

import collections
import gc
import sys
import threading
import time
import types

import numpy as np
import pytest

import reverie


@pytest.fixture(params=['thread', 'subprocess'])
def make_dataset(request):
  """How the test's datasets sample: on a thread of this process, or in a
  child process (in_subprocess=True). Called as client.dataset is."""
  sub = request.param == 'subprocess'
  return lambda client, *args, **kwargs: client.dataset(
      *args, in_subprocess=sub, **kwargs)


def _fill(client, table, n, length=1):
  with client.trajectory_writer(max(length, 1)) as w:
    for i in range(n + length - 1):
      w.append({'obs': np.full((3, 2), i, np.float32), 'act': np.int64(i)})
      if i >= length - 1:
        w.create_item(table, 1.0, {'obs': w.history['obs'][-length:],
                                   'act': w.history['act'][-1]})


def test_batches(client, reset, make_dataset):
  reset('uniform')
  _fill(client, 'uniform', 20, length=2)
  batches = list(make_dataset(client, 'uniform', 8, max_samples=24))
  assert len(batches) == 3
  for b in batches:
    assert isinstance(b, reverie.ReplaySample)
    info = b.info
    assert info.key.shape == (8,) and info.key.dtype == np.uint64
    assert info.probability.dtype == np.float64
    np.testing.assert_allclose(info.probability, 1 / 20)
    assert info.table_size.dtype == np.int64 and (info.table_size == 20).all()
    assert info.priority.dtype == np.float64
    assert info.times_sampled.dtype == np.int32
    act, obs = b.data  # no signature: flat columns, sorted keys
    assert act.shape == (8,) and act.dtype == np.int64
    assert obs.shape == (8, 2, 3, 2) and obs.dtype == np.float32
    np.testing.assert_array_equal(obs[:, 1, 0, 0], act)
    np.testing.assert_array_equal(obs[:, 0, 0, 0], act - 1)


def test_max_samples_is_exact(client, reset, make_dataset):
  reset('uniform')
  _fill(client, 'uniform', 5)
  sizes = [b.info.key.size for b in make_dataset(
      client, 'uniform', 4, max_samples=10,
      max_in_flight_samples_per_worker=3)]
  assert sizes == [4, 4, 2]
  info = client.server_info(timeout=10)['uniform']
  assert info.rate_limiter_info.sample_stats.completed == 10


def test_several_workers(client, reset, make_dataset):
  reset('uniform')
  _fill(client, 'uniform', 5)
  ds = make_dataset(client, 'uniform', 5, max_samples=30,
                    num_workers_per_iterator=3,
                    max_in_flight_samples_per_worker=4, drop_remainder=True)
  sizes = [b.info.key.size for b in ds]
  assert sum(sizes) == 30 and set(sizes) == {5}
  info = client.server_info(timeout=10)['uniform']
  assert info.rate_limiter_info.sample_stats.completed == 30
  # A Dataset can be iterated again; each pass has its own sampler.
  assert sum(b.info.key.size for b in ds) == 30


def test_structure_from_signature(client, reset, make_dataset):
  reset('sig')
  with client.trajectory_writer(1) as w:
    for i in range(4):
      w.append({'obs': np.full((3, 2), i, np.float32),
                'action': np.arange(i, i + 2), 'reward': np.float32(i)})
      w.create_item('sig', 1.0, {k: h[-1] for k, h in w.history.items()})
  (b,) = list(make_dataset(client, 'sig', 4, max_samples=4))
  assert set(b.data) == {'obs', 'action', 'reward'}
  assert b.data['obs'].shape == (4, 3, 2)
  assert b.data['action'].shape == (4, 2)
  assert b.data['reward'].shape == (4,)
  # The table's sampler is FIFO: always the oldest item.
  np.testing.assert_array_equal(b.data['reward'], [0, 0, 0, 0])
  np.testing.assert_array_equal(b.data['action'], [[0, 1]] * 4)


def test_structure_argument(client, reset, make_dataset):
  reset('uniform')
  _fill(client, 'uniform', 3)
  Pair = collections.namedtuple('Pair', 'action observation')
  (b,) = list(make_dataset(client, 'uniform', 4, max_samples=4,
                           structure=Pair(None, None)))
  assert isinstance(b.data, Pair)
  assert b.data.action.shape == (4,) and b.data.observation.shape == (4, 1, 3,
                                                                      2)


@pytest.mark.parametrize('drop_remainder', [False, True])
def test_rate_limiter_timeout_ends_iteration(client, reset, drop_remainder,
                                              make_dataset):
  reset('queue')
  _fill(client, 'queue', 5)
  start = time.monotonic()
  batches = list(make_dataset(client, 'queue', 4,
                              rate_limiter_timeout_ms=300,
                              drop_remainder=drop_remainder))
  assert time.monotonic() - start < 10
  sizes = [b.info.key.size for b in batches]
  assert sizes == ([4] if drop_remainder else [4, 1])
  acts = np.concatenate([b.data[0] for b in batches])
  np.testing.assert_array_equal(acts, np.arange(len(acts)))  # FIFO order


def test_rate_limiter_timeout_on_empty_table(client, reset, make_dataset):
  reset('empty')
  it = iter(make_dataset(client, 'empty', 2, rate_limiter_timeout_ms=50))
  with pytest.raises(StopIteration):
    next(it)
  with pytest.raises(StopIteration):
    next(it)


def test_unknown_table(client, make_dataset):
  it = iter(make_dataset(client, 'no_such_table', 2))
  with pytest.raises(reverie.TableNotFoundError, match='no_such_table'):
    next(it)


def test_unequal_shapes_cannot_be_batched(client, reset, make_dataset):
  # Items of 1 and 2 rows, alternating, so that any two in FIFO order
  # differ. There are many because, in our runs, Reverb's server handed the
  # first few to requests of the previous test's cancelled streams.
  reset('scratch')
  with client.trajectory_writer(2) as w:
    for i in range(24):
      w.append({'x': np.int32(i)})
      w.create_item('scratch', 1.0, w.history['x'][-(i % 2 + 1):])
  with pytest.raises(reverie.InvalidArgumentError, match='shapes'):
    list(make_dataset(client, 'scratch', 3, rate_limiter_timeout_ms=1000))


def test_unequal_dtypes_cannot_be_batched(client, reset, make_dataset):
  # A table without a signature can hold items whose columns differ in
  # dtype; a batch must not cast one to the other's (numpy would, silently).
  reset('scratch')
  for i in range(24):
    x = np.int32(i) if i % 2 else np.float64(i + 0.5)
    client.insert(x, {'scratch': 1.0}, timeout=10)
  with pytest.raises(reverie.InvalidArgumentError, match='dtypes'):
    list(make_dataset(client, 'scratch', 3, rate_limiter_timeout_ms=1000))


def _wait_dead(threads, seconds=10):
  deadline = time.monotonic() + seconds
  while any(t.is_alive() for t in threads):
    assert time.monotonic() < deadline, threads
    time.sleep(0.02)


def test_close_stops_background_threads(client, reset):
  reset('empty')
  it = iter(client.dataset('empty', 2))  # blocks on the rate limiter
  threads = list(it._sampler._threads)  # pylint: disable=protected-access
  time.sleep(0.2)
  assert threads and all(t.is_alive() for t in threads)
  it.close()
  _wait_dead(threads)
  with pytest.raises(StopIteration):
    next(it)


def test_leaving_a_loop_early_stops_background_threads(client, reset):
  reset('uniform')
  _fill(client, 'uniform', 5)
  it = iter(client.dataset('uniform', 2))  # unlimited, as a for loop's
  assert next(it).info.key.size == 2
  threads = list(it._sampler._threads)  # pylint: disable=protected-access
  assert all(t.is_alive() for t in threads)
  del it  # as when a for loop is left: the iterator is collected
  _wait_dead(threads)


def test_dropped_sampler_stops_background_threads(client, reset):
  # A Sampler left without close (a for loop broken out of): once it is
  # collected its workers stop, with their streams.
  reset('uniform')
  _fill(client, 'uniform', 5)
  s = client.sampler('uniform', max_in_flight_samples_per_worker=1)
  next(s)
  threads = list(s._threads)  # pylint: disable=protected-access
  assert threads and all(t.is_alive() for t in threads)
  del s
  gc.collect()
  _wait_dead(threads)


def _wait_exited(proc, seconds=10):
  deadline = time.monotonic() + seconds
  while proc.poll() is None:
    assert time.monotonic() < deadline, proc.pid
    time.sleep(0.02)


def test_subprocess_close_while_blocked(client, reset):
  # next() waits on the rate limiter of an empty table; close() from
  # another thread ends it with StopIteration and the child exits.
  reset('empty')
  it = iter(client.dataset('empty', 2, in_subprocess=True))
  proc = it._proc  # pylint: disable=protected-access
  result = []
  def consume():
    try:
      next(it)
      result.append('batch')
    except StopIteration:
      result.append('stop')
    except Exception as e:  # pylint: disable=broad-except
      result.append(e)
  t = threading.Thread(target=consume)
  t.start()
  time.sleep(0.5)
  assert proc.poll() is None and t.is_alive()
  it.close()
  t.join(10)
  assert result == ['stop']
  _wait_exited(proc)
  with pytest.raises(StopIteration):
    next(it)


def test_subprocess_collected_iterator_stops_child(client, reset):
  reset('uniform')
  _fill(client, 'uniform', 5)
  it = iter(client.dataset('uniform', 2, in_subprocess=True))
  b = next(it)
  assert b.info.key.size == 2
  assert b.data[1].flags.writeable  # received into writable memory
  b.data[1][:] = 0
  proc = it._proc  # pylint: disable=protected-access
  del it
  _wait_exited(proc)


def test_subprocess_that_finished_before_the_first_next(client, reset):
  # The child sends every batch and its end, and exits, before the parent
  # reads the first batch: the credit the parent then sends has no reader.
  reset('uniform')
  _fill(client, 'uniform', 5)
  it = iter(client.dataset('uniform', 2, max_samples=6, prefetch=4,
                           in_subprocess=True))
  _wait_exited(it._proc)  # pylint: disable=protected-access
  assert [b.info.key.size for b in it] == [2, 2, 2]


def test_subprocess_that_dies_is_an_error(client, reset):
  reset('uniform')
  _fill(client, 'uniform', 5)
  it = iter(client.dataset('uniform', 2, in_subprocess=True, prefetch=1))
  next(it)
  it._proc.kill()  # pylint: disable=protected-access
  # The batch already sent may still arrive; then the end is an error.
  with pytest.raises(reverie.ReverieError, match='subprocess ended'):
    for _ in range(3):
      next(it)
  with pytest.raises(StopIteration):
    next(it)


def test_invalid_arguments(client):
  with pytest.raises(ValueError):
    client.dataset('uniform', 4, max_in_flight_samples_per_worker=0)
  with pytest.raises(ValueError):
    client.dataset('uniform', 4, num_workers_per_iterator=0)
  with pytest.raises(ValueError):
    client.dataset('uniform', 4, prefetch=0)


# --- torch / JAX helpers (with stand-in modules: neither is installed) ---


def _fake_module(name, monkeypatch, calls):
  mod = types.ModuleType(name)
  if name == 'torch':
    def as_tensor(x, device=None):
      calls.append(('as_tensor', device))
      return ('tensor', np.asarray(x).tolist())
    mod.as_tensor = as_tensor
  else:
    def device_put(xs, device=None):
      calls.append(('device_put', device, len(xs)))
      return [('jax', np.asarray(x).tolist()) for x in xs]
    mod.device_put = device_put
  monkeypatch.setitem(sys.modules, name, mod)


def test_to_torch(monkeypatch):
  calls = []
  _fake_module('torch', monkeypatch, calls)
  info = reverie.SampleInfo(np.array([1, 2], np.uint64), np.ones(2),
                            np.ones(2, np.int64), np.ones(2), np.ones(2,
                                                                      np.int32))
  batch = reverie.ReplaySample(info, {'x': np.arange(2), 's': np.array(
      [b'a', b'b'], dtype=object)})
  out = reverie.frameworks.to_torch(batch, device='cpu')
  assert isinstance(out, reverie.ReplaySample)
  assert out.data['x'] == ('tensor', [0, 1])
  assert out.data['s'] is batch.data['s']  # strings stay numpy
  assert out.info.key == ('tensor', [1, 2])
  assert calls and all(c == ('as_tensor', 'cpu') for c in calls)


def test_to_jax(monkeypatch):
  calls = []
  _fake_module('jax', monkeypatch, calls)
  nest = {'a': np.arange(3), 'b': [np.ones(2), np.array([b'x'], object)]}
  out = reverie.frameworks.to_jax(nest)
  assert calls == [('device_put', None, 2)]
  assert out['a'] == ('jax', [0, 1, 2])
  assert out['b'][0] == ('jax', [1.0, 1.0])
  assert out['b'][1] is nest['b'][1]


ALL_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16,
              np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.bool_, np.complex64, np.complex128]


@pytest.mark.parametrize('chunk_length', [1, 2, 3])
@pytest.mark.parametrize('delta', [False, True])
def test_every_dtype_in_batches(client, reset, chunk_length, delta,
                                make_dataset):
  # Whole-chunk columns are decompressed straight into the batch; others
  # (rows inside longer chunks, strings) are decoded one by one.
  reset('queue')
  steps = []
  with client.trajectory_writer(3, chunk_length=chunk_length,
                                delta_encoded=delta) as w:
    for i in range(7):
      step = {f'{j:02d}': (np.arange(6).reshape(3, 2) * (i + 1) + j).astype(t)
              for j, t in enumerate(ALL_DTYPES)}
      step['s'] = np.array([b'x' * i, b''], dtype=object)
      steps.append(step)
      w.append(step)
      w.create_item('queue', 1.0, {k: h[-1] for k, h in w.history.items()})
  (b,) = list(make_dataset(client, 'queue', 7, max_samples=7,
                           rate_limiter_timeout_ms=10000))
  for c, k in enumerate(sorted(steps[0])):
    got = b.data[c]
    want = np.stack([s[k] for s in steps])
    assert got.dtype == want.dtype and got.shape == want.shape, k
    if want.dtype == object:
      assert got.tolist() == want.tolist()
    else:
      np.testing.assert_array_equal(got, want)
