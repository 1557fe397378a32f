"""Smoke test: DeepMind's unmodified dm-reverb client against a Reverb server.

    py=$(scripts/reverb-env.sh)
    reverie serve --config conformance/smoke.yaml --port 0    # logs addr=HOST:PORT
    "$py" conformance/smoke_reverb_client.py localhost:PORT

    "$py" conformance/smoke_reverb_client.py --self   # same checks, real Reverb

The server must have the tables of conformance/smoke.yaml, freshly started
(the checks reset the tables they use, but `--self` is the reference for the
expected values). `--self` starts Reverb's own server in-process with the same
tables, so a check that fails against reverie but passes with `--self` points
at reverie.

Each check runs in its own thread with a time limit (a hang is reported as
HANG). Prints one PASS/FAIL/HANG line per check, tracebacks for failures, and
a closing "N passed, N failed" line; exits 1 if any check did not pass.
SMOKE_ONLY=check1,check2 runs only those checks; SMOKE_DUMP_INFO=1 prints
every table's ServerInfo at the end (to compare with `--self`).
"""

import collections
import os
import sys
import threading
import time
import traceback

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import reverb
import tensorflow as tf

CHECK_TIMEOUT_S = 60

CHECKS = []


def check(fn):
  CHECKS.append(fn)
  return fn


class CheckError(AssertionError):
  pass


def expect(cond, msg):
  if not cond:
    raise CheckError(msg)


def close(a, b, tol=1e-9):
  return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


def start_self_server():
  """Reverb's own server with the tables of conformance/smoke.yaml."""
  sig = {
      'obs': tf.TensorSpec([3, 2], tf.float32, name='obs'),
      'action': tf.TensorSpec([3], tf.int64, name='action'),
      'reward': tf.TensorSpec([], tf.float32, name='reward'),
  }
  tables = [
      reverb.Table(
          name='dist',
          sampler=reverb.selectors.Prioritized(1),
          remover=reverb.selectors.Fifo(),
          max_size=1_000_000,
          rate_limiter=reverb.rate_limiters.MinSize(1)),
      reverb.Table.queue('queue', 10),
      reverb.Table(
          name='uniform',
          sampler=reverb.selectors.Uniform(),
          remover=reverb.selectors.Fifo(),
          max_size=1000,
          rate_limiter=reverb.rate_limiters.MinSize(1)),
      reverb.Table(
          name='sig',
          sampler=reverb.selectors.Uniform(),
          remover=reverb.selectors.Fifo(),
          max_size=1000,
          rate_limiter=reverb.rate_limiters.MinSize(1),
          signature=sig),
  ]
  server = reverb.Server(tables=tables, port=None)
  return server, f'localhost:{server.port}'


def sizes(client):
  return {name: info.current_size for name, info in client.server_info().items()}


# --------------------------------------------------------------------------
# Checks. Each takes (client, address).


@check
def server_info(client, address):
  info = client.server_info(timeout=10)
  expect(set(info) == {'dist', 'queue', 'uniform', 'sig'},
         f'tables: {sorted(info)}')
  d = info['dist']
  expect(d.max_size == 1_000_000, f'dist.max_size {d.max_size}')
  expect(d.sampler_options.HasField('prioritized'),
         f'dist sampler {d.sampler_options}')
  expect(d.sampler_options.prioritized.priority_exponent == 1.0,
         f'dist exponent {d.sampler_options}')
  expect(d.remover_options.fifo, f'dist remover {d.remover_options}')
  expect(d.rate_limiter_info.min_size_to_sample == 1,
         f'dist rate limiter {d.rate_limiter_info}')
  expect(d.rate_limiter_info.samples_per_insert == 1.0,
         f'dist rate limiter {d.rate_limiter_info}')
  expect(d.signature is None, f'dist signature {d.signature}')
  q = info['queue']
  expect(q.max_size == 10 and q.max_times_sampled == 1,
         f'queue max_size {q.max_size} max_times_sampled {q.max_times_sampled}')
  expect(q.sampler_options.fifo and q.remover_options.fifo,
         f'queue selectors {q.sampler_options} {q.remover_options}')
  expect(q.rate_limiter_info.max_diff == 10.0 and
         q.rate_limiter_info.min_diff == 0.0,
         f'queue rate limiter {q.rate_limiter_info}')
  s = info['sig'].signature
  expect(isinstance(s, dict) and set(s) == {'obs', 'action', 'reward'},
         f'sig signature {s!r}')
  expect(s['obs'].shape.as_list() == [3, 2] and s['obs'].dtype == tf.float32,
         f'sig obs spec {s["obs"]!r}')
  expect(s['action'].shape.as_list() == [3] and s['action'].dtype == tf.int64,
         f'sig action spec {s["action"]!r}')
  expect(s['reward'].shape.as_list() == [] and s['reward'].dtype == tf.float32,
         f'sig reward spec {s["reward"]!r}')
  return (f'{len(info)} tables; dist rate_limiter '
          f'min_diff={d.rate_limiter_info.min_diff} '
          f'max_diff={d.rate_limiter_info.max_diff}')


@check
def insert_and_sample_prioritized(client, address):
  client.reset('dist')
  data = {p: (np.full([2], p, np.float32), np.int32(p)) for p in (1.0, 2.0, 3.0)}
  for p, d in data.items():
    client.insert(d, priorities={'dist': p})
  expect(sizes(client)['dist'] == 3, f'size after 3 inserts: {sizes(client)}')
  counts = collections.Counter()
  seen = collections.Counter()
  for sample in client.sample('dist', num_samples=30, emit_timesteps=False):
    info = sample.info
    counts[info.key] += 1
    p = info.priority
    expect(p in data, f'priority {p} not one of the inserted {list(data)}')
    seen[p] += 1
    expect(close(info.probability, p / 6.0),
           f'probability {info.probability}, want {p}/6 = {p / 6.0}')
    expect(info.table_size == 3, f'table_size {info.table_size}, want 3')
    expect(info.times_sampled == counts[info.key],
           f'times_sampled {info.times_sampled}, want {counts[info.key]} '
           f'(samples of key {info.key} so far, this one included)')
    obs, scalar = sample.data
    # client.insert writes a 1-step trajectory: every column has a leading
    # time dimension of 1.
    expect(obs.shape == (1, 2) and obs.dtype == np.float32,
           f'obs {obs.shape} {obs.dtype}')
    expect(np.all(obs == p) and scalar.shape == (1,) and scalar[0] == int(p),
           f'data {sample.data} does not match priority {p}')
  expect(len(counts) >= 2, f'only keys {dict(counts)} were sampled in 30 draws')
  # emit_timesteps=True: a list with one ReplaySample per step.
  steps = next(client.sample('dist', num_samples=1))
  expect(len(steps) == 1 and steps[0].data[0].shape == (2,),
         f'emit_timesteps sample: {steps}')
  # An insert into two tables at once stores the data once, two items.
  client.reset('uniform')
  client.insert(np.arange(4, dtype=np.int64), priorities={'dist': 4.0,
                                                          'uniform': 1.0})
  sz = sizes(client)
  expect(sz['dist'] == 4 and sz['uniform'] == 1, f'sizes {sz}')
  u = next(client.sample('uniform', emit_timesteps=False))
  expect(np.array_equal(u.data[0], [[0, 1, 2, 3]]), f'uniform data {u.data}')
  expect(u.info.probability == 1.0 and u.info.table_size == 1,
         f'uniform info {u.info}')
  return f'30 draws by priority: {dict(sorted(seen.items()))}'


@check
def queue_fifo(client, address):
  client.reset('queue')
  for i in range(3):
    client.insert(np.int64(i), priorities={'queue': 1.0})
  got = []
  for sample in client.sample('queue', num_samples=3, emit_timesteps=False):
    got.append((int(sample.data[0][0]), sample.info.table_size,
                sample.info.times_sampled, sample.info.probability))
  expect([g[0] for g in got] == [0, 1, 2], f'FIFO order: {got}')
  expect(all(g[2] == 1 for g in got), f'times_sampled: {got}')
  expect(all(g[3] == 1.0 for g in got), f'probability: {got}')
  expect(sizes(client)['queue'] == 0, f'queue not emptied: {sizes(client)}')
  return f'(value, table_size, times_sampled, probability) = {got}'


@check
def queue_full_blocks_insert(client, address):
  """Queue(10): the 11th insert waits for a sample; flush times out meanwhile."""
  client.reset('queue')
  with client.trajectory_writer(num_keep_alive_refs=1) as writer:
    for i in range(11):
      writer.append(np.int64(i))
      writer.create_item('queue', 1.0, writer.history[-1:])
    try:
      writer.flush(timeout_ms=500)
      raise CheckError('flush of an 11th item into a full Queue(10) returned')
    except reverb.errors.DeadlineExceededError:
      pass
    expect(sizes(client)['queue'] == 10, f'sizes {sizes(client)}')
    first = next(client.sample('queue', emit_timesteps=False))
    expect(first.data[0][0] == 0, f'first sample {first.data}')
    writer.flush(timeout_ms=10_000)  # the sample made room
  got = [int(s.data[0][0]) for s in
         client.sample('queue', num_samples=10, emit_timesteps=False)]
  expect(got == list(range(1, 11)), f'FIFO order {got}')
  return 'flush timed out while full, completed after one sample'


@check
def trajectory_writer(client, address):
  client.reset('sig')
  client.reset('uniform')
  n_steps = 6
  with client.trajectory_writer(num_keep_alive_refs=4) as writer:
    for step in range(n_steps):
      writer.append({
          'obs': np.full([2], step, np.float32),
          'action': np.int64(10 + step),
          'reward': np.float32(0.5 * step),
      })
      if step >= 2:
        # A 3-step slice matching the 'sig' table's signature: obs [3, 2],
        # action [3], reward a scalar (a squeezed single step).
        writer.create_item('sig', priority=1.0, trajectory={
            'obs': writer.history['obs'][-3:],
            'action': writer.history['action'][-3:],
            'reward': writer.history['reward'][-1],
        })
      if step >= 1:
        # Another layout into a table without signature: a list of columns,
        # one of them a strided slice.
        writer.create_item('uniform', priority=2.0, trajectory=[
            writer.history['action'][-2:],
            writer.history['obs'][-2::1],
        ])
      if step == 3:
        writer.flush(timeout_ms=10_000)
    writer.end_episode(timeout_ms=10_000)
    # A second episode, one item.
    writer.append({'obs': np.zeros([2], np.float32), 'action': np.int64(99),
                   'reward': np.float32(9)})
    writer.create_item('uniform', priority=3.0, trajectory=[
        writer.history['action'][-1:], writer.history['obs'][-1:]])
    writer.end_episode(timeout_ms=10_000)
  info = client.server_info()
  expect(info['sig'].current_size == n_steps - 2,
         f'sig size {info["sig"].current_size}, want {n_steps - 2}')
  expect(info['uniform'].current_size == n_steps,
         f'uniform size {info["uniform"].current_size}, want {n_steps}')
  expect(info['sig'].num_episodes == 1,
         f'sig num_episodes {info["sig"].num_episodes}, want 1')
  expect(info['uniform'].num_episodes == 2,
         f'uniform num_episodes {info["uniform"].num_episodes}, want 2')
  for sample in client.sample('sig', num_samples=10, emit_timesteps=False,
                              unpack_as_table_signature=True):
    d = sample.data
    expect(set(d) == {'obs', 'action', 'reward'}, f'sig sample keys {d}')
    expect(d['obs'].shape == (3, 2) and d['action'].shape == (3,) and
           d['reward'].shape == (), f'sig sample shapes {d}')
    last = int(d['action'][-1]) - 10
    expect(list(d['action']) == [10 + last - 2, 10 + last - 1, 10 + last],
           f'sig actions {d["action"]}')
    expect(np.array_equal(d['obs'][:, 0], [last - 2, last - 1, last]),
           f'sig obs {d["obs"]} for actions {d["action"]}')
    expect(d['reward'] == np.float32(0.5 * last),
           f'sig reward {d["reward"]} for last step {last}')
  for sample in client.sample('uniform', num_samples=10, emit_timesteps=False):
    action, obs = sample.data
    expect(sample.info.priority in (2.0, 3.0), f'priority {sample.info}')
    if sample.info.priority == 3.0:
      expect(list(action) == [99] and obs.shape == (1, 2), f'ep2 {sample.data}')
    else:
      expect(action.shape == (2,) and obs.shape == (2, 2) and
             action[1] == action[0] + 1 and
             np.array_equal(obs[:, 0], action - 10),
             f'uniform sample {sample.data}')
  return (f'sig size {info["sig"].current_size}, uniform size '
          f'{info["uniform"].current_size}, episodes '
          f'{info["sig"].num_episodes}/{info["uniform"].num_episodes}')


@check
def trajectory_writer_signature_mismatch(client, address):
  """The client validates items against the signature from ServerInfo."""
  with client.trajectory_writer(num_keep_alive_refs=2) as writer:
    writer.append({'obs': np.zeros([2], np.float32), 'action': np.int32(1)})
    try:
      writer.create_item('sig', priority=1.0, trajectory={
          'obs': writer.history['obs'][-1:],
          'action': writer.history['action'][-1:],
          'reward': writer.history['obs'][-1],
      })
    except ValueError as e:
      return f'ValueError as expected: {str(e).splitlines()[0][:150]}'
  raise CheckError('create_item with a mismatching trajectory did not raise')


@check
def legacy_writer(client, address):
  client.reset('uniform')
  with client.writer(max_sequence_length=4) as writer:
    for step in range(7):
      writer.append((np.full([3], step, np.float32), np.int32(step)))
      if step >= 2:
        writer.create_item('uniform', num_timesteps=3, priority=1.5)
    writer.flush()
  expect(sizes(client)['uniform'] == 5, f'uniform size {sizes(client)}')
  # append_sequence: several steps at once.
  with client.writer(max_sequence_length=5, chunk_length=2) as writer:
    writer.append_sequence((np.arange(10, dtype=np.float32).reshape(5, 2),
                            np.arange(5, dtype=np.int32)))
    writer.create_item('dist', num_timesteps=5, priority=1.0)
  for steps in client.sample('uniform', num_samples=10):
    expect(len(steps) == 3, f'{len(steps)} timesteps, want 3')
    first = int(steps[0].data[1])
    for i, ts in enumerate(steps):
      expect(int(ts.data[1]) == first + i and np.all(ts.data[0] == first + i),
             f'timestep {i}: {ts.data}')
      expect(ts.info.priority == 1.5, f'priority {ts.info}')
  return 'ok'


@check
def trajectory_dataset_from_signature(client, address):
  # 'sig' holds the items of the trajectory_writer check (or none, if it
  # failed): make sure there is one.
  if sizes(client)['sig'] == 0:
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
      for step in range(3):
        writer.append({'obs': np.full([2], step, np.float32),
                       'action': np.int64(10 + step),
                       'reward': np.float32(0.5 * step)})
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
    expect(d['obs'].shape == (3, 2) and d['action'].shape == (3,) and
           d['reward'].shape == (), f'shapes {d}')
    expect(sample.info.table_size.numpy() >= 1, f'info {sample.info}')
    expect(sample.info.key.dtype == tf.uint64, f'key dtype {sample.info.key}')
    n += 1
  expect(n == 8, f'{n} samples, want 8')
  return f'{n} samples'


@check
def trajectory_dataset_explicit(client, address):
  client.reset('dist')
  for p in (1.0, 2.0):
    client.insert((np.full([2], p, np.float32), np.int32(p)),
                  priorities={'dist': p})
  ds = reverb.TrajectoryDataset(
      server_address=address, table='dist',
      dtypes=(tf.float32, tf.int32),
      shapes=(tf.TensorShape([1, 2]), tf.TensorShape([1])),
      max_in_flight_samples_per_worker=2, rate_limiter_timeout_ms=1000)
  got = collections.Counter()
  for sample in ds.take(20):
    obs, scalar = sample.data
    p = float(sample.info.priority.numpy())
    expect(np.all(obs.numpy() == p) and scalar.numpy()[0] == int(p),
           f'data {sample.data} priority {p}')
    expect(close(float(sample.info.probability.numpy()), p / 3.0),
           f'probability {sample.info.probability} for priority {p}')
    got[p] += 1
  expect(sum(got.values()) == 20, f'{got}')
  # Batched, as in training.
  batch = next(iter(ds.batch(4)))
  expect(batch.data[0].shape == (4, 1, 2), f'batch {batch.data[0].shape}')
  return f'20 samples by priority {dict(got)}'


@check
def trajectory_dataset_timeout_ends(client, address):
  """With rate_limiter_timeout_ms, a drained queue ends the dataset cleanly."""
  client.reset('queue')
  for i in range(3):
    client.insert(np.int64(i), priorities={'queue': 1.0})
  ds = reverb.TrajectoryDataset(
      server_address=address, table='queue', dtypes=tf.int64,
      shapes=tf.TensorShape([1]), max_in_flight_samples_per_worker=1,
      num_workers_per_iterator=1, rate_limiter_timeout_ms=300)
  start = time.monotonic()
  values = [int(s.data.numpy()[0]) for s in ds]  # must end, not raise
  took = time.monotonic() - start
  expect(values == [0, 1, 2], f'values {values}, want [0, 1, 2]')
  expect(took < 10, f'took {took:.1f}s to end')
  # An empty table with a timeout: no items, ends cleanly too.
  values = [s for s in ds]
  expect(values == [], f'empty queue gave {values}')
  return f'[0, 1, 2] then end of sequence after {took:.2f}s'


@check
def mutate_priorities(client, address):
  client.reset('dist')
  for p in (1.0, 2.0, 3.0):
    client.insert(np.float32(p), priorities={'dist': p})
  keys = {}
  for sample in client.sample('dist', num_samples=30, emit_timesteps=False):
    keys[float(sample.data[0][0])] = sample.info.key
    if len(keys) == 3:
      break
  expect(len(keys) == 3, f'could not sample all 3 keys: {keys}')
  client.mutate_priorities('dist', updates={keys[1.0]: 10.0},
                           deletes=[keys[3.0]])
  expect(sizes(client)['dist'] == 2, f'size after delete {sizes(client)}')
  for sample in client.sample('dist', num_samples=10, emit_timesteps=False):
    v = float(sample.data[0][0])
    expect(v in (1.0, 2.0), f'deleted item sampled: {v}')
    want = {1.0: 10.0, 2.0: 2.0}[v]
    expect(sample.info.priority == want, f'priority {sample.info}, want {want}')
    expect(close(sample.info.probability, want / 12.0),
           f'probability {sample.info.probability}, want {want}/12')
  # Unknown keys are ignored.
  client.mutate_priorities('dist', updates={123456789: 5.0}, deletes=[987654321])
  expect(sizes(client)['dist'] == 2, f'size after no-op {sizes(client)}')
  return 'ok'


@check
def reset(client, address):
  client.insert(np.float32(1), priorities={'dist': 1.0, 'uniform': 1.0})
  before = client.server_info()
  expect(before['dist'].current_size > 0, 'nothing to reset')
  client.reset('dist')
  after = client.server_info()
  expect(after['dist'].current_size == 0, f'dist size {after["dist"]}')
  expect(after['uniform'].current_size == before['uniform'].current_size,
         'reset of dist changed uniform')
  rl = after['dist'].rate_limiter_info
  expect(rl.insert_stats.completed == 0 and rl.sample_stats.completed == 0,
         f'rate limiter not reset: {rl}')
  # The table works after a reset.
  client.insert(np.float32(7), priorities={'dist': 1.0})
  s = next(client.sample('dist', emit_timesteps=False))
  expect(s.data[0][0] == 7 and s.info.table_size == 1 and
         s.info.times_sampled == 1, f'sample after reset {s}')
  return 'ok'


@check
def unknown_table(client, address):
  results = []
  try:
    next(client.sample('no_such_table'))
    raise CheckError('sample from an unknown table did not raise')
  except CheckError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    msg = str(e).splitlines()[0][:200]
    expect('no_such_table' in str(e), f'message does not name the table: {msg}')
    results.append(f'sample: {type(e).__name__}: {msg}')
  ds = reverb.TrajectoryDataset(
      server_address=address, table='no_such_table', dtypes=tf.int64,
      shapes=tf.TensorShape([1]), max_in_flight_samples_per_worker=1,
      rate_limiter_timeout_ms=300)
  try:
    list(ds.take(1))
    raise CheckError('dataset from an unknown table did not raise')
  except tf.errors.NotFoundError as e:
    results.append(f'dataset: NotFoundError: {e.message.splitlines()[0][:200]}')
  try:
    client.mutate_priorities('no_such_table', updates={1: 1.0})
    raise CheckError('mutate_priorities on an unknown table did not raise')
  except CheckError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    results.append(f'mutate: {type(e).__name__}: {str(e).splitlines()[0][:200]}')
  try:
    client.reset('no_such_table')
    raise CheckError('reset of an unknown table did not raise')
  except CheckError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    results.append(f'reset: {type(e).__name__}: {str(e).splitlines()[0][:200]}')
  try:
    client.insert(np.int64(1), priorities={'no_such_table': 1.0})
    raise CheckError('insert into an unknown table did not raise')
  except CheckError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    results.append(f'insert: {type(e).__name__}: {str(e).splitlines()[0][:200]}')
  # The check above fails in the client (signature cache); this one reaches
  # the server's InsertStream.
  writer = client.trajectory_writer(num_keep_alive_refs=1,
                                    validate_items=False)
  try:
    writer.append(np.int64(1))
    writer.create_item('no_such_table', 1.0, writer.history[-1:])
    writer.flush(timeout_ms=10_000)
    raise CheckError('insert (unvalidated) into an unknown table did not raise')
  except CheckError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    expect('no_such_table' in str(e), f'message does not name the table: {e}')
    results.append(
        f'insert unvalidated: {type(e).__name__}: {str(e).splitlines()[0][:200]}')
  return '\n      '.join(results)


# --------------------------------------------------------------------------


def run_check(fn, client, address):
  """Runs fn in a thread; returns (status, detail)."""
  result = {}

  def target():
    try:
      result['detail'] = fn(client, address)
      result['status'] = 'PASS'
    except Exception:  # pylint: disable=broad-except
      result['status'] = 'FAIL'
      result['detail'] = traceback.format_exc()

  t = threading.Thread(target=target, daemon=True, name=fn.__name__)
  t.start()
  t.join(CHECK_TIMEOUT_S)
  if t.is_alive():
    return 'HANG', f'still running after {CHECK_TIMEOUT_S}s'
  return result['status'], result['detail']


def main(argv):
  if len(argv) != 2:
    print(__doc__, file=sys.stderr)
    return 2
  server = None
  if argv[1] == '--self':
    server, address = start_self_server()
  else:
    address = argv[1]
  only = os.environ.get('SMOKE_ONLY', '').split(',')
  client = reverb.Client(address)
  passed = failed = 0
  for fn in CHECKS:
    if only != [''] and fn.__name__ not in only:
      continue
    status, detail = run_check(fn, client, address)
    if status == 'PASS':
      passed += 1
      print(f'PASS {fn.__name__}: {detail}', flush=True)
    else:
      failed += 1
      print(f'{status} {fn.__name__}:\n{detail}', flush=True)
  if os.environ.get('SMOKE_DUMP_INFO'):
    # The tables' state after the checks, to compare with `--self`.
    for name, info in sorted(client.server_info(timeout=10).items()):
      print(f'--- {name}\n{info}', flush=True)
  print(f'{passed} passed, {failed} failed', flush=True)
  if server is not None:
    server.stop()
  # A hung check leaves a thread blocked in C++: don't wait for it.
  os._exit(0 if failed == 0 else 1)  # pylint: disable=protected-access


if __name__ == '__main__':
  sys.exit(main(sys.argv))
