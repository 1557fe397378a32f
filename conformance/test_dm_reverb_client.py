"""DeepMind's unmodified dm-reverb client against a Reverb-compatible server.

Every test talks to one server over gRPC (see conftest.py): reverie by
default, Reverb's own server with --server=reverb. The tables are those of
conformance/configs/dm_reverb_client.yaml; each test resets the tables it
uses first.

Where reverie departs from Reverb on purpose (docs/compatibility.md,
"Departures"), the test asserts each server's documented behaviour and names
the departure; everything else must behave the same on both servers.

The test groups are the rows of the conformance matrix in
docs/compatibility.md: each test function's name starts with its group.
"""

import collections
import threading
import time

import numpy as np
import pytest
import reverb
from reverb import structured_writer
import tensorflow as tf
import tree

DBL_MAX = np.finfo(np.float64).max

# How long a call must stay blocked for the test to call it blocked, and how
# long a blocked call may take to finish once unblocked.
BLOCKED_S = 0.5
UNBLOCK_S = 15
# Timeouts for calls that must complete.
FLUSH_MS = 15_000


# ---------------------------------------------------------------------------
# Helpers


class Background:
  """Runs fn(*args) in a daemon thread (a call that may block)."""

  def __init__(self, fn, *args, **kwargs):
    self._out = {}

    def run():
      try:
        self._out['value'] = fn(*args, **kwargs)
      except BaseException as e:  # pylint: disable=broad-except
        self._out['error'] = e

    self._thread = threading.Thread(target=run, daemon=True)
    self._thread.start()

  def finished_within(self, seconds):
    self._thread.join(seconds)
    return not self._thread.is_alive()

  def result(self, timeout=UNBLOCK_S):
    if not self.finished_within(timeout):
      raise AssertionError(f'call still blocked after {timeout}s')
    if 'error' in self._out:
      raise self._out['error']
    return self._out.get('value')


def reset(client, *tables):
  for table in tables:
    client.reset(table)


def table_info(client, table):
  return client.server_info(timeout=30)[table]


def size(client, table):
  return table_info(client, table).current_size


def sample_values(client, table, n):
  """The first element of column 0 of n samples, as Python numbers."""
  return [s.data[0].flat[0].item() for s in
          client.sample(table, num_samples=n, emit_timesteps=False)]


def write_items(client, table, values, num_keep_alive_refs=1):
  """One item per value (a single-step trajectory), confirmed."""
  with client.trajectory_writer(num_keep_alive_refs) as writer:
    for v in values:
      writer.append(v)
      writer.create_item(table, 1.0, writer.history[-1:])
    writer.flush(timeout_ms=FLUSH_MS)


# ---------------------------------------------------------------------------
# Client.insert and Client.sample


def test_insert_sample_info_prioritized(client):
  reset(client, 'prio')
  data = {p: (np.full([2], p, np.float32), np.int32(p)) for p in (1., 2., 3.)}
  for p, d in data.items():
    client.insert(d, priorities={'prio': p})
  assert size(client, 'prio') == 3
  counts = collections.Counter()
  for sample in client.sample('prio', num_samples=30, emit_timesteps=False):
    info = sample.info
    counts[info.key] += 1
    assert info.priority in data
    assert info.probability == pytest.approx(info.priority / 6.0)
    assert info.table_size == 3
    # times_sampled counts this sample too.
    assert info.times_sampled == counts[info.key]
    obs, scalar = sample.data
    # client.insert writes one step: every column has a time axis of 1.
    assert obs.dtype == np.float32 and obs.shape == (1, 2)
    np.testing.assert_array_equal(obs, np.full([1, 2], info.priority))
    assert scalar.dtype == np.int32 and scalar.tolist() == [int(info.priority)]
  assert len(counts) >= 2, dict(counts)
  assert table_info(client, 'prio').num_unique_samples == len(counts)


def test_insert_sample_emit_timesteps(client):
  reset(client, 'prio')
  client.insert((np.arange(3, dtype=np.float64), np.int64(5)), {'prio': 2.5})
  steps = next(client.sample('prio'))
  assert len(steps) == 1
  (step,) = steps
  np.testing.assert_array_equal(step.data[0], [0., 1., 2.])
  assert step.data[1] == 5 and step.data[1].dtype == np.int64
  assert step.info.priority == 2.5
  assert step.info.probability == 1.0
  assert step.info.table_size == 1
  assert step.info.times_sampled == 1


def test_insert_sample_several_tables(client):
  """One insert into two tables stores two items over the same data."""
  reset(client, 'prio', 'uniform')
  client.insert(np.arange(4, dtype=np.int64), {'prio': 4.0, 'uniform': 1.0})
  assert size(client, 'prio') == 1 and size(client, 'uniform') == 1
  u = next(client.sample('uniform', emit_timesteps=False))
  p = next(client.sample('prio', emit_timesteps=False))
  np.testing.assert_array_equal(u.data[0], [[0, 1, 2, 3]])
  np.testing.assert_array_equal(p.data[0], [[0, 1, 2, 3]])
  assert u.info.key != p.info.key
  assert (u.info.priority, p.info.priority) == (1.0, 4.0)
  assert u.info.probability == 1.0 and u.info.table_size == 1


def test_insert_sample_zero_priority_never_sampled(client):
  reset(client, 'prio')
  client.insert(np.int64(0), {'prio': 0.0})
  client.insert(np.int64(1), {'prio': 1.0})
  got = sample_values(client, 'prio', 20)
  assert got == [1] * 20
  assert size(client, 'prio') == 2


def test_insert_sample_uniform_probability(client):
  reset(client, 'uniform')
  for i in range(4):
    client.insert(np.int64(i), {'uniform': 1.0 + i})
  for sample in client.sample('uniform', num_samples=10,
                              emit_timesteps=False):
    # Uniform ignores priorities: 1/N, and the item's priority is reported.
    assert sample.info.probability == pytest.approx(0.25)
    assert sample.info.table_size == 4
    assert sample.info.priority == 1.0 + sample.data[0][0]


def test_insert_sample_large_item(client):
  """A 12 MB step (incompressible): more than gRPC's 4 MiB default."""
  reset(client, 'uniform')
  big = np.random.default_rng(1).standard_normal([3, 1_000_000]).astype(
      np.float32)
  client.insert((big, np.int64(1)), {'uniform': 1.0})
  sample = next(client.sample('uniform', emit_timesteps=False))
  np.testing.assert_array_equal(sample.data[0], big[np.newaxis])
  assert sample.data[1].tolist() == [1]


# ---------------------------------------------------------------------------
# TrajectoryWriter


def test_trajectory_writer_several_columns(client):
  """Dict steps; items with a signature (validated) and without one."""
  reset(client, 'sig', 'uniform')
  with client.trajectory_writer(num_keep_alive_refs=4) as writer:
    for step in range(6):
      writer.append({
          'obs': np.full([2], step, np.float32),
          'action': np.int64(10 + step),
          'reward': np.float32(0.5 * step),
      })
      if step >= 2:
        # The 'sig' table's signature: obs [3, 2], action [3], reward a
        # scalar (one squeezed step).
        writer.create_item('sig', priority=1.0, trajectory={
            'obs': writer.history['obs'][-3:],
            'action': writer.history['action'][-3:],
            'reward': writer.history['reward'][-1],
        })
      if step >= 1:
        writer.create_item('uniform', priority=2.0, trajectory=[
            writer.history['action'][-2:],
            writer.history['obs'][-2:],
        ])
    writer.flush(timeout_ms=FLUSH_MS)
  assert size(client, 'sig') == 4 and size(client, 'uniform') == 5
  for sample in client.sample('sig', num_samples=12, emit_timesteps=False,
                              unpack_as_table_signature=True):
    d = sample.data
    assert set(d) == {'obs', 'action', 'reward'}
    assert d['obs'].shape == (3, 2) and d['obs'].dtype == np.float32
    assert d['action'].shape == (3,) and d['action'].dtype == np.int64
    assert d['reward'].shape == () and d['reward'].dtype == np.float32
    last = int(d['action'][-1]) - 10
    assert d['action'].tolist() == [8 + last, 9 + last, 10 + last]
    np.testing.assert_array_equal(d['obs'][:, 0], [last - 2, last - 1, last])
    assert d['reward'] == np.float32(0.5 * last)
  for sample in client.sample('uniform', num_samples=12,
                              emit_timesteps=False):
    action, obs = sample.data
    assert action.shape == (2,) and obs.shape == (2, 2)
    assert action[1] == action[0] + 1
    np.testing.assert_array_equal(obs[:, 0], action - 10)
    assert sample.info.priority == 2.0


def test_trajectory_writer_items_across_chunks(client):
  """Fixed chunk lengths 2 and 3: items span several chunks, strided too."""
  reset(client, 'fifo_items')
  with client.trajectory_writer(num_keep_alive_refs=8) as writer:
    writer.configure(('x',), num_keep_alive_refs=8, max_chunk_length=2)
    writer.configure(('y',), num_keep_alive_refs=8, max_chunk_length=3)
    for step in range(8):
      writer.append({'x': np.int64(step),
                     'y': np.full([2], step, np.float32)})
      if step == 4:
        # steps 0..4: x in chunks [0,1] [2,3] [4,.], y in [0,1,2] [3,4,.]
        writer.create_item('fifo_items', 1.0, {
            'x': writer.history['x'][-5:], 'y': writer.history['y'][-5:]})
    writer.create_item('fifo_items', 2.0, {
        'x': writer.history['x'][-7:], 'y': writer.history['y'][-7:]})
    writer.create_item('fifo_items', 3.0, {
        'x': writer.history['x'][-6::2], 'y': writer.history['y'][[0, 7]]})
    writer.flush(timeout_ms=FLUSH_MS)
  samples = list(client.sample('fifo_items', num_samples=3,
                               emit_timesteps=False))
  want = [(list(range(0, 5)), list(range(0, 5))),
          (list(range(1, 8)), list(range(1, 8))),
          ([2, 4, 6], [0, 7])]
  for sample, (xs, ys) in zip(samples, want):
    x, y = sample.data  # flattened in sorted key order
    assert x.dtype == np.int64 and x.tolist() == xs
    assert y.shape == (len(ys), 2)
    np.testing.assert_array_equal(y[:, 1], ys)
  assert [s.info.priority for s in samples] == [1.0, 2.0, 3.0]


def test_trajectory_writer_overlapping_items(client):
  """Every step is in three items; chunks are shared by items."""
  reset(client, 'fifo_items')
  with client.trajectory_writer(num_keep_alive_refs=3) as writer:
    for step in range(10):
      writer.append({'v': np.array([step, -step], np.int32)})
      if step >= 2:
        writer.create_item('fifo_items', float(step),
                           [writer.history['v'][-3:]])
    writer.flush(timeout_ms=FLUSH_MS)
  assert size(client, 'fifo_items') == 8
  for i, sample in enumerate(client.sample('fifo_items', num_samples=8,
                                           emit_timesteps=False)):
    (v,) = sample.data
    np.testing.assert_array_equal(v[:, 0], [i, i + 1, i + 2])
    np.testing.assert_array_equal(v[:, 1], [-i, -i - 1, -i - 2])
    assert sample.info.priority == i + 2


def test_trajectory_writer_squeeze(client):
  """history[i] squeezes the step; history[i:j] keeps the time axis."""
  reset(client, 'fifo_items')
  with client.trajectory_writer(num_keep_alive_refs=2) as writer:
    for step in range(2):
      writer.append({'m': np.full([2, 3], step, np.float64),
                     's': np.int16(step)})
    writer.create_item('fifo_items', 1.0, [
        writer.history['m'][-1], writer.history['m'][-1:],
        writer.history['s'][0], writer.history['s'][-2:]])
    writer.flush(timeout_ms=FLUSH_MS)
  sample = next(client.sample('fifo_items', emit_timesteps=False))
  m_squeezed, m, s_squeezed, s = sample.data
  assert m_squeezed.shape == (2, 3) and np.all(m_squeezed == 1)
  assert m.shape == (1, 2, 3) and np.all(m == 1)
  assert s_squeezed.shape == () and s_squeezed.dtype == np.int16
  assert s_squeezed == 0
  assert s.tolist() == [0, 1]


def test_trajectory_writer_partial_steps(client):
  """append(partial_step=True) builds one step in parts; gaps are skipped."""
  reset(client, 'fifo_items')
  with client.trajectory_writer(num_keep_alive_refs=3) as writer:
    writer.append({'a': np.int64(1)}, partial_step=True)
    writer.append({'b': np.float32(1.5)})
    assert writer.episode_steps == 1
    writer.append({'a': np.int64(2)})  # no 'b' at this step
    writer.create_item('fifo_items', 1.0, {
        'a': writer.history['a'][-2:], 'b': writer.history['b'][-2]})
    with pytest.raises(ValueError):
      writer.create_item('fifo_items', 1.0, {'b': writer.history['b'][-1:]})
    writer.flush(timeout_ms=FLUSH_MS)
  sample = next(client.sample('fifo_items', emit_timesteps=False))
  a, b = sample.data
  assert a.tolist() == [1, 2] and b == np.float32(1.5)


def test_trajectory_writer_end_episode(client):
  reset(client, 'uniform')
  with client.trajectory_writer(num_keep_alive_refs=2) as writer:
    for step in range(3):
      writer.append({'x': np.int64(step)})
      writer.create_item('uniform', 1.0, [writer.history['x'][-1:]])
    assert writer.episode_steps == 3
    writer.end_episode(timeout_ms=FLUSH_MS)
    assert writer.episode_steps == 0
    # clear_buffers (the default) empties the history.
    with pytest.raises(ValueError):
      writer.create_item('uniform', 1.0, [writer.history['x'][-1:]])
    writer.append({'x': np.int64(100)})
    writer.create_item('uniform', 1.0, [writer.history['x'][-1:]])
    writer.end_episode(timeout_ms=FLUSH_MS)
  info = table_info(client, 'uniform')
  assert info.current_size == 4
  assert info.num_episodes == 2
  # Uniform over 4 items: 200 draws all miss one with odds (3/4)**200,
  # below 1e-24 (40, as once here, is 1e-5).
  got = sorted(sample_values(client, 'uniform', 200))
  assert set(got) <= {0, 1, 2, 100} and 100 in got


def test_trajectory_writer_end_episode_keep_buffers(client):
  """end_episode(clear_buffers=False): items may span two episodes."""
  reset(client, 'fifo_items')
  with client.trajectory_writer(num_keep_alive_refs=3) as writer:
    writer.append(np.int64(1))
    writer.append(np.int64(2))
    writer.end_episode(clear_buffers=False, timeout_ms=FLUSH_MS)
    writer.append(np.int64(3))
    writer.create_item('fifo_items', 1.0, writer.history[-3:])
    writer.end_episode(timeout_ms=FLUSH_MS)
  info = table_info(client, 'fifo_items')
  assert info.current_size == 1
  assert info.num_episodes == 2
  assert next(client.sample('fifo_items', emit_timesteps=False)
             ).data[0].tolist() == [1, 2, 3]


def test_trajectory_writer_flush_timeout_full_queue(client):
  """Queue(1): the second item waits for a sample; flush times out."""
  reset(client, 'queue1')
  writer = client.trajectory_writer(num_keep_alive_refs=1)
  try:
    writer.append(np.int64(0))
    writer.create_item('queue1', 1.0, writer.history[-1:])
    writer.flush(timeout_ms=FLUSH_MS)
    writer.append(np.int64(1))
    writer.create_item('queue1', 1.0, writer.history[-1:])
    start = time.monotonic()
    with pytest.raises(reverb.errors.DeadlineExceededError):
      writer.flush(timeout_ms=300)
    assert time.monotonic() - start < 5
    with pytest.raises(reverb.errors.DeadlineExceededError):
      writer.end_episode(timeout_ms=300)
    assert size(client, 'queue1') == 1
    assert sample_values(client, 'queue1', 1) == [0]
    writer.flush(timeout_ms=FLUSH_MS)  # the sample made room
    assert sample_values(client, 'queue1', 1) == [1]
  finally:
    writer.close()


def test_trajectory_writer_validates_signature(client):
  """validate_items checks items against the signature from ServerInfo."""
  reset(client, 'sig')
  with client.trajectory_writer(num_keep_alive_refs=2) as writer:
    writer.append({'obs': np.zeros([2], np.float32), 'action': np.int32(1)})
    with pytest.raises(ValueError, match='sig'):
      writer.create_item('sig', priority=1.0, trajectory={
          'obs': writer.history['obs'][-1:],
          'action': writer.history['action'][-1:],
          'reward': writer.history['obs'][-1],
      })
  assert size(client, 'sig') == 0


def test_trajectory_writer_concurrent_writers(client):
  """Four writers at once, 1200 items into a table of max_size 1000."""
  reset(client, 'uniform')

  def write(offset):
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
      for i in range(300):
        writer.append(np.int64(offset + i))
        writer.create_item('uniform', 1.0, writer.history[-1:])
      writer.flush(timeout_ms=60_000)

  workers = [Background(write, 1000 * w) for w in range(4)]
  for w in workers:
    w.result(timeout=60)
  info = table_info(client, 'uniform')
  assert info.current_size == 1000  # the FIFO remover evicted 200
  assert info.rate_limiter_info.insert_stats.completed == 1200
  assert info.num_episodes == 4


# ---------------------------------------------------------------------------
# Legacy Writer (client.writer)


def test_legacy_writer_items_and_timesteps(client):
  reset(client, 'uniform')
  with client.writer(max_sequence_length=4) as writer:
    for step in range(7):
      writer.append((np.full([3], step, np.float32), np.int32(step)))
      if step >= 2:
        writer.create_item('uniform', num_timesteps=3, priority=1.5)
  assert size(client, 'uniform') == 5
  for steps in client.sample('uniform', num_samples=10):
    assert len(steps) == 3
    first = int(steps[0].data[1])
    for i, ts in enumerate(steps):
      assert int(ts.data[1]) == first + i
      np.testing.assert_array_equal(ts.data[0], np.full([3], first + i))
      assert ts.info.priority == 1.5


def test_legacy_writer_append_sequence_chunks(client):
  reset(client, 'fifo_items')
  with client.writer(max_sequence_length=5, chunk_length=2) as writer:
    writer.append_sequence((np.arange(10, dtype=np.float32).reshape(5, 2),
                            np.arange(5, dtype=np.int32)))
    writer.create_item('fifo_items', num_timesteps=5, priority=1.0)
    writer.create_item('fifo_items', num_timesteps=3, priority=2.0)
    writer.flush()
  first, second = client.sample('fifo_items', num_samples=2,
                                emit_timesteps=False)
  np.testing.assert_array_equal(first.data[0],
                                np.arange(10).reshape(5, 2))
  assert first.data[1].tolist() == [0, 1, 2, 3, 4]
  assert second.data[1].tolist() == [2, 3, 4]
  assert second.data[0].shape == (3, 2)


def test_legacy_writer_delta_encoded(client):
  reset(client, 'fifo_items')
  frames = np.cumsum(np.ones([6, 4, 4], np.int64), axis=0)
  with client.writer(max_sequence_length=6, delta_encoded=True,
                     chunk_length=3) as writer:
    for frame in frames:
      writer.append(frame)
    writer.create_item('fifo_items', num_timesteps=6, priority=1.0)
  sample = next(client.sample('fifo_items', emit_timesteps=False))
  np.testing.assert_array_equal(sample.data[0], frames)


# ---------------------------------------------------------------------------
# TrajectoryDataset and TimestepDataset


def test_dataset_trajectory_explicit_specs(client, address):
  reset(client, 'traj_ds')
  for p in (1.0, 2.0):
    client.insert((np.full([2], p, np.float32), np.int32(p)),
                  priorities={'traj_ds': p})
  ds = reverb.TrajectoryDataset(
      server_address=address, table='traj_ds',
      dtypes=(tf.float32, tf.int32),
      shapes=(tf.TensorShape([1, 2]), tf.TensorShape([1])),
      max_in_flight_samples_per_worker=2, rate_limiter_timeout_ms=1000)
  got = collections.Counter()
  for sample in ds.take(20):
    obs, scalar = sample.data
    p = float(sample.info.priority.numpy())
    np.testing.assert_array_equal(obs.numpy(), np.full([1, 2], p))
    assert scalar.numpy().tolist() == [int(p)]
    assert float(sample.info.probability.numpy()) == pytest.approx(p / 3.0)
    assert int(sample.info.table_size.numpy()) == 2
    assert sample.info.key.dtype == tf.uint64
    got[p] += 1
  assert sum(got.values()) == 20
  batch = next(iter(ds.batch(4)))
  assert batch.data[0].shape == (4, 1, 2)
  assert batch.info.key.shape == (4,)


def test_dataset_trajectory_from_table_signature(client, address):
  reset(client, 'sig')
  with client.trajectory_writer(num_keep_alive_refs=3) as writer:
    for step in range(4):
      writer.append({'obs': np.full([2], step, np.float32),
                     'action': np.int64(10 + step),
                     'reward': np.float32(0.5 * step)})
      if step >= 2:
        writer.create_item('sig', priority=1.0, trajectory={
            'obs': writer.history['obs'][-3:],
            'action': writer.history['action'][-3:],
            'reward': writer.history['reward'][-1]})
  ds = reverb.TrajectoryDataset.from_table_signature(
      server_address=address, table='sig',
      max_in_flight_samples_per_worker=4, rate_limiter_timeout_ms=1000)
  n = 0
  for sample in ds.take(8):
    d = sample.data
    assert d['obs'].shape == (3, 2) and d['action'].shape == (3,)
    assert d['reward'].shape == ()
    last = int(d['action'][-1]) - 10
    assert float(d['reward']) == 0.5 * last
    n += 1
  assert n == 8


def test_dataset_trajectory_from_nested_signature(client, address):
  reset(client, 'deep_sig')
  with client.trajectory_writer(num_keep_alive_refs=3) as writer:
    for step in range(3):
      writer.append({'a': {'b': np.full([3], step, np.float32),
                           'c': np.int64(step)},
                     'x': np.uint64(2**63 + step)})
    writer.create_item('deep_sig', 1.0, {
        'a': {'b': writer.history['a']['b'][-3:],
              'c': writer.history['a']['c'][-1]},
        'x': writer.history['x'][-2:]})
  ds = reverb.TrajectoryDataset.from_table_signature(
      server_address=address, table='deep_sig',
      max_in_flight_samples_per_worker=1, rate_limiter_timeout_ms=1000)
  got = [s.data for s in ds]  # a queue: one sample, then the timeout
  assert len(got) == 1
  d = got[0]
  np.testing.assert_array_equal(d['a']['b'].numpy(),
                                [[0, 0, 0], [1, 1, 1], [2, 2, 2]])
  assert int(d['a']['c']) == 2
  assert d['x'].dtype == tf.uint64
  assert d['x'].numpy().tolist() == [2**63 + 1, 2**63 + 2]


def test_dataset_trajectory_max_in_flight_samples_per_worker(client, address):
  """Samples are requested max_in_flight_samples_per_worker at a time."""
  reset(client, 'inflight')
  for i in range(10):
    client.insert(np.int64(i), {'inflight': 1.0})
  ds = reverb.TrajectoryDataset(
      server_address=address, table='inflight', dtypes=tf.int64,
      shapes=tf.TensorShape([1]), max_in_flight_samples_per_worker=3,
      num_workers_per_iterator=1, rate_limiter_timeout_ms=1000)
  it = iter(ds)
  for _ in range(12):
    next(it)
    stats = table_info(client, 'inflight').rate_limiter_info.sample_stats
    assert stats.completed % 3 == 0, stats
    assert stats.completed >= 3
  del it


def test_dataset_timestep(client, address):
  """TimestepDataset yields one element per step, item after item."""
  reset(client, 'step_ds')
  with client.writer(max_sequence_length=3, chunk_length=2) as writer:
    for step in range(10):
      writer.append((np.full([2], step, np.float32), np.int64(step)))
      if step >= 2:
        writer.create_item('step_ds', num_timesteps=3, priority=1.0)
  ds = reverb.TimestepDataset(
      server_address=address, table='step_ds',
      dtypes=(tf.float32, tf.int64),
      shapes=(tf.TensorShape([2]), tf.TensorShape([])),
      max_in_flight_samples_per_worker=2, num_workers_per_iterator=1,
      rate_limiter_timeout_ms=1000)
  elements = [(int(s.info.key), s.data[0].numpy(), int(s.data[1]))
              for s in ds.take(12)]
  assert len(elements) == 12
  for i in range(0, 12, 3):
    run = elements[i:i + 3]
    assert len({key for key, _, _ in run}) == 1, run
    steps = [step for _, _, step in run]
    assert steps == [steps[0], steps[0] + 1, steps[0] + 2]
    for _, obs, step in run:
      np.testing.assert_array_equal(obs, [step, step])


def test_dataset_timestep_max_in_flight_samples_per_worker(client, address):
  """Reverb's timestep_dataset_test: counters move in whole requests."""
  reset(client, 'inflight')
  for _ in range(10):
    client.insert(np.ones([3, 3], np.int32), {'inflight': 1.0})
  ds = reverb.TimestepDataset(
      server_address=address, table='inflight', dtypes=(tf.int32,),
      shapes=(tf.TensorShape([3, 3]),), max_in_flight_samples_per_worker=4,
      num_workers_per_iterator=1)
  it = iter(ds)
  for _ in range(20):
    np.testing.assert_array_equal(next(it).data[0], np.ones([3, 3]))
    stats = table_info(client, 'inflight').rate_limiter_info.sample_stats
    assert stats.completed % 4 == 0, stats
  del it


def test_dataset_timeout_ends_after_queue_drained(client, address):
  """rate_limiter_timeout_ms: a drained queue ends the dataset, no error."""
  reset(client, 'timeout_queue')
  for i in range(3):
    client.insert(np.int64(i), {'timeout_queue': 1.0})
  ds = reverb.TrajectoryDataset(
      server_address=address, table='timeout_queue', dtypes=tf.int64,
      shapes=tf.TensorShape([1]), max_in_flight_samples_per_worker=1,
      num_workers_per_iterator=1, rate_limiter_timeout_ms=300)
  start = time.monotonic()
  values = [int(s.data.numpy()[0]) for s in ds]
  assert values == [0, 1, 2]
  assert time.monotonic() - start < 10
  assert [s for s in ds] == []  # still empty: ends again


def test_dataset_timeout_partial_batch(client, address):
  """A request for 4 samples from a queue holding 3, with a timeout.

  Both servers send the 3 samples they could take at once (Reverb 0.14.0's
  table worker finalises a batch that has samples when no more can be
  taken) and the next request times out, which ends the dataset. Departure
  2 (Reverb losing samples taken by a request that then expires) needs the
  deadline to pass between two samples of one batch, a race this test does
  not provoke.
  """
  reset(client, 'partial_batch')
  for i in range(3):
    client.insert(np.int64(i), {'partial_batch': 1.0})
  ds = reverb.TrajectoryDataset(
      server_address=address, table='partial_batch', dtypes=tf.int64,
      shapes=tf.TensorShape([1]), max_in_flight_samples_per_worker=4,
      num_workers_per_iterator=1, rate_limiter_timeout_ms=300)
  values = [int(s.data.numpy()[0]) for s in ds]
  assert values == [0, 1, 2]
  info = table_info(client, 'partial_batch')
  assert info.current_size == 0
  assert info.rate_limiter_info.sample_stats.completed == 3


def test_dataset_timeout_zero(client, address, server_kind):
  """Departure 1: rate_limiter_timeout_ms=0 on an empty table.

  reverie: 0 means "do not wait", so the dataset ends at once. Reverb's
  server waits without limit, so the dataset blocks until an item arrives.
  """
  reset(client, 'timeout0')
  ds = reverb.TrajectoryDataset(
      server_address=address, table='timeout0', dtypes=tf.int64,
      shapes=tf.TensorShape([1]), max_in_flight_samples_per_worker=1,
      num_workers_per_iterator=1, rate_limiter_timeout_ms=0)
  bg = Background(lambda: [int(s.data.numpy()[0]) for s in ds.take(1)])
  if server_kind == 'reverie':
    assert bg.result(timeout=10) == []
    assert size(client, 'timeout0') == 0
  else:
    assert not bg.finished_within(2), 'Reverb returned at once'
    client.insert(np.int64(42), {'timeout0': 1.0})
    assert bg.result() == [42]


# ---------------------------------------------------------------------------
# mutate_priorities


def _keys_by_value(client, table, n, draws=200):
  """Samples until the keys of n items (by their int64 value) are known."""
  keys = {}
  for sample in client.sample(table, num_samples=draws, emit_timesteps=False):
    keys[int(sample.data[0][0])] = sample.info.key
    if len(keys) == n:
      break
  assert len(keys) == n, keys
  return keys


def test_mutate_priorities_updates(client):
  reset(client, 'prio')
  for i in range(4):
    client.insert(np.int64(i), {'prio': 1.0})
  keys = _keys_by_value(client, 'prio', 4)
  client.mutate_priorities('prio', updates={keys[0]: 3.0})
  seen = set()
  for sample in client.sample('prio', num_samples=40, emit_timesteps=False):
    v = int(sample.data[0][0])
    seen.add(v)
    if v == 0:
      assert sample.info.priority == 3.0
      assert sample.info.probability == pytest.approx(0.5)
    else:
      assert sample.info.priority == 1.0
      assert sample.info.probability == pytest.approx(1 / 6)
  assert 0 in seen
  # Priority 0: never sampled again.
  client.mutate_priorities('prio', updates={keys[0]: 0.0, keys[1]: 0.0})
  assert set(sample_values(client, 'prio', 20)) <= {2, 3}


def test_mutate_priorities_deletes(client):
  reset(client, 'prio')
  for i in range(4):
    client.insert(np.int64(i), {'prio': 1.0 + i})
  keys = _keys_by_value(client, 'prio', 4)
  client.mutate_priorities('prio', deletes=[keys[1], keys[3]])
  assert size(client, 'prio') == 2
  for sample in client.sample('prio', num_samples=20, emit_timesteps=False):
    v = int(sample.data[0][0])
    assert v in (0, 2)
    assert sample.info.probability == pytest.approx((1.0 + v) / 4.0)
  # Deletes go first: an update of a key deleted in the same call is
  # ignored, as are unknown keys.
  client.mutate_priorities('prio', updates={keys[0]: 5.0, 123456789: 1.0},
                           deletes=[keys[0], 987654321])
  assert size(client, 'prio') == 1
  assert sample_values(client, 'prio', 3) == [2, 2, 2]


def test_mutate_priorities_invalid_priority(client, server_kind):
  """Departure 8: an update to a negative priority in a Prioritized table.

  Both servers fail the call with INVALID_ARGUMENT (ValueError). reverie
  checks the whole request first and changes nothing. Reverb 0.14.0 applies
  the updates before the bad one, stores the bad priority on its item (which
  samples then report) and keeps the item's old weight in the selector.
  """
  reset(client, 'prio_invalid')
  for v in (0, 1):
    client.insert(np.int64(v), {'prio_invalid': 1.0})
  keys = _keys_by_value(client, 'prio_invalid', 2)
  with pytest.raises(ValueError):
    client.mutate_priorities('prio_invalid',
                             updates={keys[0]: 5.0, keys[1]: -1.0})
  if server_kind == 'reverie':
    want = {0: (1.0, 0.5), 1: (1.0, 0.5)}
  else:
    want = {0: (5.0, 5 / 6), 1: (-1.0, 1 / 6)}
  seen = set()
  for sample in client.sample('prio_invalid', num_samples=30,
                              emit_timesteps=False):
    v = int(sample.data[0][0])
    seen.add(v)
    priority, probability = want[v]
    assert sample.info.priority == priority, (v, sample.info)
    assert sample.info.probability == pytest.approx(probability), (
        v, sample.info)
  assert 0 in seen


# ---------------------------------------------------------------------------
# reset


def test_reset(client):
  client.insert(np.float32(1), priorities={'prio': 1.0, 'uniform': 1.0})
  next(client.sample('prio'))
  before = client.server_info()
  assert before['prio'].current_size > 0
  client.reset('prio')
  after = client.server_info()
  assert after['prio'].current_size == 0
  assert after['prio'].num_episodes == 0
  assert after['prio'].num_unique_samples == 0
  assert after['uniform'].current_size == before['uniform'].current_size
  rl = after['prio'].rate_limiter_info
  assert rl.insert_stats.completed == 0 and rl.sample_stats.completed == 0
  # The table works after a reset.
  client.insert(np.float32(7), priorities={'prio': 1.0})
  s = next(client.sample('prio', emit_timesteps=False))
  assert s.data[0][0] == 7 and s.info.table_size == 1
  assert s.info.times_sampled == 1


def test_reset_unblocks_full_queue_writer(client):
  """A reset empties a full queue, so a waiting insert goes in."""
  reset(client, 'queue_block')
  writer = client.trajectory_writer(num_keep_alive_refs=1)
  try:
    for i in range(3):
      writer.append(np.int64(i))
      writer.create_item('queue_block', 1.0, writer.history[-1:])
      if i == 1:
        writer.flush(timeout_ms=FLUSH_MS)  # Queue(2) is full
    bg = Background(writer.flush)
    assert not bg.finished_within(BLOCKED_S)
    client.reset('queue_block')
    bg.result()
    assert size(client, 'queue_block') == 1
    assert sample_values(client, 'queue_block', 1) == [2]
  finally:
    writer.close()


# ---------------------------------------------------------------------------
# server_info


def test_server_info_tables_and_options(client, server_config):
  info = client.server_info(timeout=10)
  assert set(info) == {t['name'] for t in server_config['tables']}
  p = info['prio']
  assert p.name == 'prio' and p.max_size == 1000 and p.max_times_sampled == 0
  assert p.sampler_options.prioritized.priority_exponent == 1.0
  assert not p.sampler_options.is_deterministic
  assert p.remover_options.fifo and p.remover_options.is_deterministic
  rl = p.rate_limiter_info
  assert (rl.samples_per_insert, rl.min_size_to_sample) == (1.0, 1)
  assert (rl.min_diff, rl.max_diff) == (-DBL_MAX, DBL_MAX)
  q = info['queue']
  assert q.max_size == 10 and q.max_times_sampled == 1
  assert q.sampler_options.fifo and q.remover_options.fifo
  assert (q.rate_limiter_info.min_diff, q.rate_limiter_info.max_diff) == (
      0.0, 10.0)
  s = info['stack']
  assert s.sampler_options.lifo and s.remover_options.lifo
  assert s.max_times_sampled == 1 and s.rate_limiter_info.max_diff == 10.0
  u = info['uniform']
  assert u.sampler_options.uniform and not u.sampler_options.is_deterministic
  r = info['ratio'].rate_limiter_info
  assert (r.samples_per_insert, r.min_size_to_sample, r.min_diff,
          r.max_diff) == (2.0, 1, 0.0, 4.0)


def test_server_info_counts(client):
  reset(client, 'prio')
  client.insert(np.int64(1), {'prio': 1.0})
  for _ in client.sample('prio', num_samples=3):
    pass
  info = table_info(client, 'prio')
  assert info.current_size == 1
  assert info.num_unique_samples == 1
  assert info.num_episodes == 1
  assert info.rate_limiter_info.insert_stats.completed == 1
  assert info.rate_limiter_info.sample_stats.completed == 3
  client.insert(np.int64(2), {'prio': 1.0})
  info = table_info(client, 'prio')
  assert info.current_size == 2 and info.num_episodes == 2


def test_server_info_without_signature(client):
  info = client.server_info()
  for table in ('prio', 'uniform', 'queue', 'ratio'):
    assert info[table].signature is None, table


def test_server_info_flat_signature(client):
  sig = client.server_info()['sig'].signature
  assert isinstance(sig, dict) and set(sig) == {'obs', 'action', 'reward'}
  assert sig['obs'] == tf.TensorSpec([3, 2], tf.float32, name='obs')
  assert sig['action'] == tf.TensorSpec([3], tf.int64, name='action')
  assert sig['reward'] == tf.TensorSpec([], tf.float32, name='reward')


def _spec(spec):
  """(shape, dtype) of a TensorSpec; shape None when the rank is unknown."""
  assert isinstance(spec, tf.TensorSpec), spec
  return (spec.shape.as_list() if spec.shape.rank is not None else None,
          spec.dtype)


def test_server_info_nested_signatures(client):
  info = client.server_info()
  nested = info['nested_sig'].signature
  assert tree.map_structure(_spec, nested) == {
      'a': ([3], tf.int64), 'b': ([3, 2, 2], tf.float32)}
  deep = info['deep_sig'].signature
  assert tree.map_structure(_spec, deep) == {
      'a': {'b': ([3, 3], tf.float32), 'c': ([], tf.int64)},
      'x': ([None], tf.uint64)}
  lst = info['list_sig'].signature
  assert isinstance(lst, list) and len(lst) == 3
  assert isinstance(lst[1], tuple)
  assert tree.map_structure(_spec, lst) == [
      ([2], tf.float32), (([], tf.int32), ([None, 2], tf.string)),
      (None, tf.bool)]
  assert lst[0].name == 'first'


# ---------------------------------------------------------------------------
# Queue and stack semantics


def test_queue_fifo_order(client):
  reset(client, 'queue')
  for i in range(3):
    client.insert(np.int64(i), {'queue': 1.0})
  got = [(int(s.data[0][0]), s.info.table_size, s.info.times_sampled,
          s.info.probability)
         for s in client.sample('queue', num_samples=3, emit_timesteps=False)]
  # Each item is sampled once (max_times_sampled 1) and then removed.
  assert got == [(0, 3, 1, 1.0), (1, 2, 1, 1.0), (2, 1, 1, 1.0)]
  assert size(client, 'queue') == 0


def test_queue_sample_blocks_until_insert(client):
  reset(client, 'queue_block')
  bg = Background(sample_values, client, 'queue_block', 2)
  assert not bg.finished_within(BLOCKED_S)
  client.insert(np.int64(7), {'queue_block': 1.0})
  assert not bg.finished_within(BLOCKED_S)  # one item, one sample
  client.insert(np.int64(8), {'queue_block': 1.0})
  assert bg.result() == [7, 8]
  assert size(client, 'queue_block') == 0


def test_queue_insert_blocks_until_sample(client):
  reset(client, 'queue_block')
  writer = client.trajectory_writer(num_keep_alive_refs=1)
  try:
    for i in range(3):
      writer.append(np.int64(i))
      writer.create_item('queue_block', 1.0, writer.history[-1:])
      if i == 1:
        writer.flush(timeout_ms=FLUSH_MS)  # Queue(2) is full
    bg = Background(writer.flush)  # no timeout: waits for room
    assert not bg.finished_within(BLOCKED_S)
    assert size(client, 'queue_block') == 2
    assert sample_values(client, 'queue_block', 1) == [0]
    bg.result()
    assert sample_values(client, 'queue_block', 2) == [1, 2]
  finally:
    writer.close()


def test_stack_lifo_order(client):
  reset(client, 'stack')
  for i in range(3):
    client.insert(np.int64(i), {'stack': 1.0})
  got = [(int(s.data[0][0]), s.info.table_size, s.info.times_sampled)
         for s in client.sample('stack', num_samples=3, emit_timesteps=False)]
  assert got == [(2, 3, 1), (1, 2, 1), (0, 1, 1)]
  assert size(client, 'stack') == 0


def test_stack_sample_blocks_until_insert(client):
  reset(client, 'stack_block')
  bg = Background(sample_values, client, 'stack_block', 1)
  assert not bg.finished_within(BLOCKED_S)
  client.insert(np.int64(5), {'stack_block': 1.0})
  assert bg.result() == [5]


def test_stack_insert_blocks_until_sample(client):
  reset(client, 'stack_block')
  writer = client.trajectory_writer(num_keep_alive_refs=1)
  try:
    for i in range(3):
      writer.append(np.int64(i))
      writer.create_item('stack_block', 1.0, writer.history[-1:])
      if i == 1:
        writer.flush(timeout_ms=FLUSH_MS)  # Stack(2) is full
    bg = Background(writer.flush)
    assert not bg.finished_within(BLOCKED_S)
    assert sample_values(client, 'stack_block', 1) == [1]  # newest of 0, 1
    bg.result()
    assert sample_values(client, 'stack_block', 2) == [2, 0]
  finally:
    writer.close()


# ---------------------------------------------------------------------------
# SampleToInsertRatio(samples_per_insert=2, min_size_to_sample=1,
# error_buffer=2): min_diff 0, max_diff 4, cursor = 2 * inserts - samples.


def test_rate_limiter_ratio_insert_blocks_until_samples(client):
  reset(client, 'ratio')
  writer = client.trajectory_writer(num_keep_alive_refs=1)
  try:
    for i in range(2):  # cursor 2, then 4 = max_diff
      writer.append(np.int64(i))
      writer.create_item('ratio', 1.0, writer.history[-1:])
    writer.flush(timeout_ms=FLUSH_MS)
    writer.append(np.int64(2))
    writer.create_item('ratio', 1.0, writer.history[-1:])
    bg = Background(writer.flush)  # cursor would be 6 > 4
    assert not bg.finished_within(BLOCKED_S)
    assert sample_values(client, 'ratio', 1) == [0]  # cursor 3: 5 > 4
    assert not bg.finished_within(BLOCKED_S)
    assert sample_values(client, 'ratio', 1) == [0]  # cursor 2: 4 <= 4
    bg.result()
    rl = table_info(client, 'ratio').rate_limiter_info
    assert rl.insert_stats.completed == 3
    assert rl.sample_stats.completed == 2
  finally:
    writer.close()


def test_rate_limiter_ratio_sample_blocks_until_insert(client):
  reset(client, 'ratio')
  client.insert(np.int64(0), {'ratio': 1.0})  # cursor 2
  assert sample_values(client, 'ratio', 2) == [0, 0]  # cursor 0 = min_diff
  bg = Background(sample_values, client, 'ratio', 1)
  assert not bg.finished_within(BLOCKED_S)
  client.insert(np.int64(1), {'ratio': 1.0})  # cursor 2
  assert bg.result() == [0]  # FIFO sampler, items stay
  rl = table_info(client, 'ratio').rate_limiter_info
  assert rl.insert_stats.completed == 2
  assert rl.sample_stats.completed == 3


# ---------------------------------------------------------------------------
# reverb.structured_writer (as in Reverb's structured_writer_test.py)

SW_STEP_SPEC = {
    'a': np.zeros([], np.float32),
    'b': {'c': np.zeros([2, 2], np.int32),
          'd': [np.zeros([3], np.int64), np.zeros([6], np.int64)]},
}


def _sw_step(i):
  return tree.map_structure(lambda x: np.ones_like(x) * i, SW_STEP_SPEC)


def _table_content(client, table, structure=None):
  n = table_info(client, table).current_size
  if n == 0:
    return []
  flat = [s.data for s in client.sample(table, num_samples=n,
                                        emit_timesteps=False)]
  if structure is not None:
    return [tree.unflatten_as(structure, f) for f in flat]
  return flat


@pytest.mark.parametrize('condition_name,want', [
    ('step_index_le_2', [0, 1, 2]),
    ('step_index_mod_3', [0, 3, 6, 9]),
    ('steps_since_applied_ge_4', [3, 7]),
    ('is_end_episode', [9]),
])
def test_structured_writer_conditions(client, condition_name, want):
  c = structured_writer.Condition
  condition = {
      'step_index_le_2': c.step_index() <= 2,
      'step_index_mod_3': c.step_index() % 3 == 0,
      'steps_since_applied_ge_4': c.steps_since_applied() >= 4,
      'is_end_episode': c.is_end_episode(),
  }[condition_name]
  reset(client, 'sw_0')
  pattern = structured_writer.pattern_from_transform(
      step_structure=None, transform=lambda x: x[-1])
  config = structured_writer.create_config(
      pattern=pattern, table='sw_0', conditions=[condition])
  writer = client.structured_writer([config])
  for i in range(10):
    writer.append(np.int64(i))
  writer.end_episode(timeout_ms=FLUSH_MS)
  assert [[int(x) for x in d] for d in _table_content(client, 'sw_0')] == [
      [w] for w in want]


def test_structured_writer_patterns(client):
  ref = structured_writer.create_reference_step(SW_STEP_SPEC)
  pattern = {'x': ref['a'][-3], 'y': ref['b']['c'][-2:],
             'z': ref['b']['d'][0][-1], 'every_second_a': ref['a'][-5::2]}
  reset(client, 'sw_0')
  config = structured_writer.create_config(pattern=pattern, table='sw_0')
  writer = client.structured_writer([config])
  for i in range(7):
    writer.append(_sw_step(i))
  writer.end_episode(timeout_ms=FLUSH_MS)
  got = _table_content(client, 'sw_0', pattern)
  assert len(got) == 3  # the pattern needs 5 steps: items at steps 4, 5, 6
  for i, item in enumerate(got):
    last = i + 4
    assert item['x'] == np.float32(last - 2)
    np.testing.assert_array_equal(
        item['y'], np.stack([np.full([2, 2], last - 1, np.int32),
                             np.full([2, 2], last, np.int32)]))
    np.testing.assert_array_equal(item['z'], np.full([3], last))
    np.testing.assert_array_equal(item['every_second_a'],
                                  [last - 4, last - 2, last])


def test_structured_writer_round_robin_tables(client):
  tables = ('sw_0', 'sw_1', 'sw_2')
  reset(client, *tables)
  pattern = structured_writer.pattern_from_transform(
      step_structure=None, transform=lambda x: x[-1])
  configs = [
      structured_writer.create_config(
          pattern=pattern, table=table,
          conditions=[structured_writer.Condition.step_index() % 3 == i])
      for i, table in enumerate(tables)
  ]
  writer = client.structured_writer(configs)
  for i in range(6):
    writer.append(np.int64(i))
  writer.end_episode(timeout_ms=FLUSH_MS)
  for i, table in enumerate(tables):
    got = [[int(x) for x in d] for d in _table_content(client, table)]
    assert got == [[i], [i + 3]], table


def test_structured_writer_data_condition_and_td_error(client):
  reset(client, 'sw_0', 'sw_1')
  step_spec = {'a': None, 'b': None, 'c': None}
  pattern = structured_writer.pattern_from_transform(
      step_spec, lambda x: {'last_a': x['a'][-1], 'last_c': x['c'][-1]})
  td = structured_writer.create_config(
      pattern=pattern, table='sw_0',
      priority=structured_writer.td_error(
          max_priority_weight=.5, step_structure=step_spec,
          get_field_from_step_fn=lambda x: x['c']))
  when_b_big = structured_writer.create_config(
      pattern=pattern, table='sw_1',
      conditions=[structured_writer.Condition.data(step_spec)['b'] > 3])
  writer = client.structured_writer([td, when_b_big])
  for i in range(5):
    writer.append({'a': i, 'b': i + 1, 'c': i + 2})
  writer.flush()
  priorities = [s.info.priority for s in
                client.sample('sw_0', num_samples=5, emit_timesteps=False)]
  # One step per item: the TD error is column c itself.
  assert priorities == [2., 3., 4., 5., 6.]
  got = _table_content(client, 'sw_1',
                       structured_writer.unpack_pattern(when_b_big))
  assert [(int(g['last_a']), int(g['last_c'])) for g in got] == [
      (3, 5), (4, 6)]


# ---------------------------------------------------------------------------
# Every numpy dtype, written and read back unchanged

_rng = np.random.default_rng(7)


def _ints(dtype):
  info = np.iinfo(dtype)
  return np.array([[info.min, -1 if info.min else 0, 0],
                   [1, info.max - 1, info.max]], dtype)


DTYPE_CASES = {
    'bool': np.array([[True, False, True], [False, False, True]]),
    'float16': (np.arange(6, dtype=np.float16) / 3).reshape(2, 3),
    'float32': np.array([[np.pi, -0.0, np.inf], [1e-38, -3.4e38, 7]],
                        np.float32),
    'float64': np.array([[np.e, -1e308, 5e-324], [-np.inf, 0, 1]], np.float64),
    'int8': _ints(np.int8),
    'int16': _ints(np.int16),
    'int32': _ints(np.int32),
    'int64': _ints(np.int64),
    'uint8': _ints(np.uint8),
    'uint16': _ints(np.uint16),
    'uint32': _ints(np.uint32),
    'uint64': _ints(np.uint64),
    'complex64': (np.arange(6) + 1j * np.arange(6, 0, -1)).astype(
        np.complex64).reshape(2, 3),
    'complex128': np.array([[1 + 2j, -3.5j, 1e300], [0, -1, 2j]],
                           np.complex128),
    'bytes': np.array([[b'a', b'', b'\x00\xff\x01'], [b'x' * 70, b'y', b'z']],
                      dtype=object),
    'str': np.array([['a', 'caf\u00e9'], ['\u2603', '']]),
    'long_bytes': np.array([_rng.bytes(100_000), b'short', b'x' * 300_000],
                           dtype=object),
    'python_int': 123,
    'python_float': 1.25,
}


def _expected(value):
  """What a sample returns for value: strings come back as bytes."""
  a = np.asarray(value)
  if a.dtype.kind == 'U':
    return np.vectorize(lambda s: s.encode('utf-8'), otypes=[object])(a)
  return a


@pytest.mark.parametrize('name', sorted(DTYPE_CASES))
def test_dtype_round_trip(client, name):
  value = DTYPE_CASES[name]
  want = _expected(value)
  reset(client, 'dtypes')
  client.insert(value, {'dtypes': 1.0})  # the legacy writer
  with client.trajectory_writer(num_keep_alive_refs=2) as writer:
    writer.append(value)
    writer.append(value)
    writer.create_item('dtypes', 1.0, writer.history[-2:])
  inserted, written = client.sample('dtypes', num_samples=2,
                                    emit_timesteps=False)
  for sample in (inserted, written):
    (got,) = sample.data
    if want.dtype == object:
      assert got.dtype == object
    else:
      assert got.dtype == want.dtype
  np.testing.assert_array_equal(inserted.data[0], want[np.newaxis])
  np.testing.assert_array_equal(written.data[0], np.stack([want, want]))


# ---------------------------------------------------------------------------
# Errors


def test_error_unknown_table_sample(client):
  with pytest.raises(RuntimeError, match='no_such_table'):
    next(client.sample('no_such_table'))


def test_error_unknown_table_dataset(address):
  ds = reverb.TrajectoryDataset(
      server_address=address, table='no_such_table', dtypes=tf.int64,
      shapes=tf.TensorShape([1]), max_in_flight_samples_per_worker=1,
      rate_limiter_timeout_ms=300)
  with pytest.raises(tf.errors.NotFoundError, match='no_such_table'):
    list(ds.take(1))


def test_error_unknown_table_mutate_and_reset(client):
  with pytest.raises(RuntimeError, match='no_such_table'):
    client.mutate_priorities('no_such_table', updates={1: 1.0})
  with pytest.raises(RuntimeError, match='no_such_table'):
    client.reset('no_such_table')


def test_error_unknown_table_insert(client):
  """Writers validate table names against ServerInfo before sending."""
  with pytest.raises(ValueError, match='no_such_table'):
    client.insert(np.int64(1), priorities={'no_such_table': 1.0})
  with client.trajectory_writer(num_keep_alive_refs=1) as writer:
    writer.append(np.int64(1))
    with pytest.raises(ValueError, match='no_such_table'):
      writer.create_item('no_such_table', 1.0, writer.history[-1:])


def test_error_unknown_table_insert_unvalidated(client):
  """Without validation the server's InsertStream rejects the item."""
  writer = client.trajectory_writer(num_keep_alive_refs=1,
                                    validate_items=False)
  try:
    writer.append(np.int64(1))
    writer.create_item('no_such_table', 1.0, writer.history[-1:])
    with pytest.raises(RuntimeError, match='no_such_table'):
      writer.flush(timeout_ms=FLUSH_MS)
  finally:
    writer.close()


def test_error_sample_timeout_ends_dataset(client, address):
  """A rate limiter timeout on an empty table is end of sequence, no error."""
  assert size(client, 'empty') == 0
  for make in (reverb.TrajectoryDataset, reverb.TimestepDataset):
    ds = make(server_address=address, table='empty', dtypes=tf.int64,
              shapes=tf.TensorShape([]), max_in_flight_samples_per_worker=2,
              rate_limiter_timeout_ms=200)
    start = time.monotonic()
    assert list(ds) == []
    assert time.monotonic() - start < 10
