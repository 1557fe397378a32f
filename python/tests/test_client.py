"""Client: insert/sample round trips, priorities, reset, server_info,
checkpoint and the error paths, against the session's server."""

import pickle
import time

import grpc
import numpy as np
import pytest

import reverie

from conftest import free_port

ALL_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16,
              np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.bool_, np.complex64, np.complex128]


def _values(dtype, shape):
  dtype = np.dtype(dtype)
  n = int(np.prod(shape))
  if dtype.kind == 'b':
    flat = np.arange(n) % 3 == 0
  elif dtype.kind in 'iu':
    info = np.iinfo(dtype)
    flat = (np.arange(n) * 37 + info.min).astype(dtype)
    flat[0] = info.max
  elif dtype.kind == 'c':
    flat = (np.arange(n) - 1.5j * np.arange(n)).astype(dtype)
  else:
    flat = (np.arange(n) * -1.25).astype(dtype)
    flat[-1] = np.nan
  return flat.reshape(shape)


def _sample_all(client, table, n, **kwargs):
  return list(client.sample(table, n, emit_timesteps=False, timeout=10,
                            **kwargs))


def _equal(a, b):
  a, b = np.asarray(a), np.asarray(b)
  assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape,
                                                      b.dtype, b.shape)
  if a.dtype.kind == 'O':
    assert a.tolist() == b.tolist()
  else:
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def test_insert_and_sample_every_dtype(client, reset):
  reset('queue')
  steps = []
  for dtype in ALL_DTYPES:
    step = {'scalar': _values(dtype, ()), 'matrix': _values(dtype, (3, 2))}
    client.insert(step, {'queue': 1.0})
    steps.append(step)
  strings = {'bytes': np.array([b'a\x00b', b'', b'x' * 300], dtype=object),
             'text': np.array(['h\xe9llo', 'w'])}
  client.insert(strings, {'queue': 1.0})
  samples = _sample_all(client, 'queue', len(steps) + 1)
  for step, sample in zip(steps, samples):
    # Columns in dm-tree order (sorted keys), leading dimension 1.
    _equal(sample.data[0], step['matrix'][None])
    _equal(sample.data[1], step['scalar'][None])
  last = samples[-1].data
  assert last[0].tolist() == [[b'a\x00b', b'', b'x' * 300]]
  assert last[1].tolist() == [['h\xe9llo'.encode(), b'w']]


def test_sample_emit_timesteps_and_python_values(client, reset):
  reset('queue')
  client.insert([0, 1.5, True, 'text', b'raw'], {'queue': 1.0})
  (steps,) = list(client.sample('queue', 1, timeout=10))
  assert len(steps) == 1
  data = steps[0].data
  assert [d.dtype for d in data] == [np.int64, np.float64, np.bool_, object,
                                     object]
  assert [d.item() for d in data] == [0, 1.5, True, b'text', b'raw']
  assert all(isinstance(d, np.ndarray) and d.shape == () for d in data)


def test_insert_into_several_tables(client, reset):
  reset('queue', 'uniform')
  client.insert(np.arange(4, dtype=np.int32), {'queue': 1.0, 'uniform': 2.0})
  (q,) = _sample_all(client, 'queue', 1)
  (u,) = _sample_all(client, 'uniform', 1)
  _equal(q.data[0], np.arange(4, dtype=np.int32)[None])
  _equal(u.data[0], q.data[0])
  assert u.info.priority == 2.0 and q.info.priority == 1.0


def test_sample_info(client, reset):
  reset('prio')
  for p in (1.0, 1.0, 2.0):
    client.insert(np.float32(p), {'prio': p})
  seen = {}
  for sample in _sample_all(client, 'prio', 60):
    info = sample.info
    assert isinstance(info, reverie.SampleInfo)
    assert info.table_size == 3
    assert info.probability == pytest.approx(info.priority / 4.0)
    assert info.priority == pytest.approx(float(sample.data[0][0]))
    assert info.times_sampled >= 1
    seen[info.key] = info.times_sampled
  assert len(seen) == 3
  assert sum(seen.values()) == 60


def test_mutate_priorities(client, reset):
  reset('prio')
  for i in range(3):
    client.insert(np.int64(i), {'prio': 1.0})
  # 200 draws, so that each item is seen (an item of probability 1/3 is
  # missed with odds (2/3)**200, below 1e-35).
  keys = {}
  for s in _sample_all(client, 'prio', 200):
    keys[int(s.data[0][0])] = s.info.key
  assert len(keys) == 3
  client.mutate_priorities('prio', updates={keys[0]: 2.0},
                           deletes=[keys[2]], timeout=10)
  assert client.server_info(timeout=10)['prio'].current_size == 2
  probs = {}
  for s in _sample_all(client, 'prio', 200):
    probs[int(s.data[0][0])] = (s.info.probability, s.info.priority)
  assert probs[0] == (pytest.approx(2 / 3), 2.0)
  assert probs[1] == (pytest.approx(1 / 3), 1.0)
  assert 2 not in probs
  # Unknown keys are ignored.
  client.mutate_priorities('prio', updates={12345: 3.0}, deletes=[6789])


def test_reset(client, reset):
  reset('queue')
  for i in range(5):
    client.insert(np.int32(i), {'queue': 1.0})
  info = client.server_info(timeout=10)['queue']
  assert info.current_size == 5
  assert info.rate_limiter_info.insert_stats.completed == 5
  client.reset('queue', timeout=10)
  info = client.server_info(timeout=10)['queue']
  assert info.current_size == 0
  assert info.rate_limiter_info.insert_stats.completed == 0


def test_server_info(client, reset):
  reset('prio')
  client.insert(np.int32(1), {'prio': 1.0})
  _sample_all(client, 'prio', 1)
  infos = client.server_info(timeout=10)
  assert {'queue', 'prio', 'uniform', 'empty', 'sig', 'nested_sig'} <= set(
      infos)
  prio = infos['prio']
  assert isinstance(prio, reverie.TableInfo)
  assert prio.name == 'prio'
  assert prio.max_size == 1000
  assert prio.max_times_sampled == 0
  assert prio.current_size == 1
  assert prio.num_unique_samples == 1
  assert prio.num_episodes == 1
  assert prio.sampler_options.prioritized.priority_exponent == 1.0
  assert prio.remover_options.fifo
  assert prio.rate_limiter_info.min_size_to_sample == 1
  assert prio.rate_limiter_info.sample_stats.completed == 1
  assert prio.signature is None
  assert prio.table_worker_time is not None

  sig = infos['sig'].signature
  assert set(sig) == {'obs', 'action', 'reward'}
  assert sig['obs'] == reverie.TensorSpec((3, 2), np.dtype(np.float32), 'obs')
  assert sig['action'].shape == (None,) and sig['action'].dtype == np.int64
  assert sig['reward'].shape == () and sig['reward'].name is None

  nested = infos['nested_sig'].signature
  assert nested['a']['b'].shape == (2,)
  assert nested['a']['c'].dtype == np.int64
  x = nested['x']
  assert isinstance(x, list) and isinstance(x[1], tuple)
  assert x[0].shape == (None, 2) and x[0].dtype == np.uint8
  assert x[1][0].dtype == object and x[1][0].shape == ()
  assert x[1][1].dtype == np.bool_ and x[1][1].shape is None


def test_checkpoint(client):
  path = client.checkpoint(timeout=30)
  assert isinstance(path, str) and path


def test_sample_unknown_table(client):
  with pytest.raises(reverie.TableNotFoundError) as e:
    next(client.sample('no_such_table', timeout=5))
  assert e.value.code == grpc.StatusCode.NOT_FOUND
  assert 'no_such_table' in e.value.details
  assert isinstance(e.value, LookupError)


def test_insert_unknown_table(client):
  with pytest.raises(reverie.TableNotFoundError, match='no_such_table'):
    client.insert(np.int32(1), {'no_such_table': 1.0}, timeout=10)


def test_unary_calls_unknown_table(client):
  with pytest.raises(reverie.TableNotFoundError, match='no_such_table'):
    client.reset('no_such_table', timeout=10)
  with pytest.raises(reverie.TableNotFoundError, match='no_such_table'):
    client.mutate_priorities('no_such_table', {1: 1.0}, timeout=10)


def test_rate_limiter_timeout(client, reset):
  reset('empty')
  start = time.monotonic()
  with pytest.raises(reverie.RateLimiterTimeoutError) as e:
    next(client.sample('empty', timeout=0.3))
  elapsed = time.monotonic() - start
  assert 0.25 <= elapsed < 5
  assert isinstance(e.value, reverie.DeadlineExceededError)
  assert isinstance(e.value, TimeoutError)
  assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
  assert 'Rate Limiter' in e.value.details


def test_invalid_argument_from_server(client, reset):
  reset('prio')
  client.insert(np.int32(1), {'prio': 1.0})
  (s,) = _sample_all(client, 'prio', 1)
  with pytest.raises(reverie.InvalidArgumentError) as e:
    client.mutate_priorities('prio', {s.info.key: -1.0}, timeout=10)
  assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
  assert e.value.details
  assert isinstance(e.value, ValueError)
  reset('prio')


def test_invalid_arguments_caught_locally(client):
  with pytest.raises(ValueError):
    client.insert(np.int32(1), {})
  with pytest.raises(reverie.InvalidArgumentError):
    client.dataset('queue', 0)
  with pytest.raises(ValueError):
    client.trajectory_writer(0)


def test_server_unavailable():
  c = reverie.Client(f'127.0.0.1:{free_port()}')
  start = time.monotonic()
  with pytest.raises(reverie.ServerUnavailableError) as e:
    c.server_info(timeout=0.5)
  assert time.monotonic() - start < 5
  assert isinstance(e.value, ConnectionError)
  assert isinstance(e.value, reverie.DeadlineExceededError)
  assert e.value.details
  with pytest.raises(reverie.ServerUnavailableError):
    next(c.sample('queue', timeout=0.3))
  with pytest.raises(reverie.ServerUnavailableError):
    c.insert(np.int32(1), {'queue': 1.0}, timeout=0.5)
  c.close()


def test_closed_client(address):
  c = reverie.Client(address)
  c.close()
  c.close()
  with pytest.raises(reverie.ClosedError):
    c.server_info(timeout=1)
  with pytest.raises(reverie.ClosedError):
    c.trajectory_writer(1)
  with pytest.raises(reverie.ClosedError):
    next(c.sample('queue'))


def test_client_pickles(address):
  options = (('grpc.max_receive_message_length', 64 << 20),)
  c = pickle.loads(pickle.dumps(reverie.Client(address,
                                               channel_options=options)))
  assert c.server_address == address
  assert c._channel_options == options  # pylint: disable=protected-access
  assert 'queue' in c.server_info(timeout=10)
  c.close()


@pytest.mark.reverie_only
def test_sampler_reopens_streams_after_a_restart(own_reverie):
  port = free_port()
  srv = own_reverie(listen=f'127.0.0.1:{port}')
  c = reverie.Client(srv.address)
  c.insert(np.int32(1), {'queue': 1.0}, timeout=10)
  with c.sampler('queue', max_in_flight_samples_per_worker=1) as s:
    info, cols = s.next(timeout=10)
    assert cols[0].tolist() == [1]
    srv.stop()  # the stream fails with UNAVAILABLE; the sampler retries
    with pytest.raises(reverie.ServerUnavailableError):
      s.next(timeout=0.5)
    own_reverie(listen=f'127.0.0.1:{port}')  # a new, empty server
    c.insert(np.int32(2), {'queue': 1.0}, timeout=10)
    info, cols = s.next(timeout=20)
    assert cols[0].tolist() == [2] and info.times_sampled == 1
  c.close()
