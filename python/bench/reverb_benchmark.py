"""One client's half of python/bench/run.sh: writes, then samples batches.

    python reverb_benchmark.py --client reverie --address 127.0.0.1:PORT
    python reverb_benchmark.py --client dm-reverb --address 127.0.0.1:PORT

runs the same two workloads with reverie's Python client (in .venv-py) or
DeepMind's dm-reverb 0.14.0 (in .venv-reverb, with TensorFlow), against a
server holding python/bench/bench.yaml's table, and prints one JSON line.

* writes: ``--steps`` steps of one float32[87] feature vector, each
  appended to a trajectory writer (num_keep_alive_refs=1) and made an item
  of its own with ``create_item`` (the per-step pattern of an Acme actor),
  then one flush; the figure is steps per second, flush included. The
  code is the same for both clients: only the import differs.
* sampling: batches of ``--batch-size`` (256) samples of those items, as
  numpy arrays [256, 87] float32 plus the sample info, the way a learner
  consumes them (Acme's reverb_benchmark shape): reverie's
  ``client.dataset(table, 256)``, and for dm-reverb
  ``TrajectoryDataset(...).batch(256).prefetch(2).as_numpy_iterator()``;
  both with max_in_flight_samples_per_worker=512 and one worker. The
  figure is batches per second over ``--batches`` batches after
  ``--warmup``.
* sampling beside a busy learner: the same, but the consumer runs
  ``--learner-ms`` (5) ms of pure Python after each batch, as a learner's
  step that holds the GIL would. reverie is measured twice: with the
  dataset's sampler on a thread (the default) and with
  ``in_subprocess=True``; for the latter also without the learner's work.

CPU seconds of this process (all threads) and, with ``--server-pid``, of
the server are measured around each workload; for the writes also the CPU
of the calling thread alone (``time.thread_time``), which is what an actor
gives up per step: the rest runs on the clients' own threads.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

TABLE = 'bench'
FEATURES = 87


def _cpu(pid=None):
  """CPU seconds (user + system) of a process (this one by default)."""
  if pid is None:
    t = os.times()
    return t.user + t.system
  with open(f'/proc/{pid}/stat') as f:
    fields = f.read().rsplit(')', 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def _measure(fn, server_pid):
  """Wall, process CPU, server CPU and this thread's CPU seconds of fn()."""
  s0, c0, t0 = _cpu(server_pid) if server_pid else 0.0, _cpu(), time.perf_counter()
  th0 = time.thread_time()
  fn()
  th1 = time.thread_time()
  t1, c1 = time.perf_counter(), _cpu()
  s1 = _cpu(server_pid) if server_pid else 0.0
  return t1 - t0, c1 - c0, s1 - s0, th1 - th0


def bench_writes(client, steps):
  """The write workload, ready to run, and its writer."""
  x = np.random.default_rng(0).random(FEATURES, dtype=np.float32)
  client.reset(TABLE)
  writer = client.trajectory_writer(num_keep_alive_refs=1)
  # Warm up: the signature lookup and the stream.
  writer.append({'features': x})
  writer.create_item(TABLE, 1.0, {'features': writer.history['features'][-1]})
  writer.flush()

  def run():
    for _ in range(steps):
      writer.append({'features': x})
      writer.create_item(TABLE, 1.0,
                         {'features': writer.history['features'][-1]})
    writer.flush()

  return run, writer


def dataset_iterator(name, mod, client, address, batch_size,
                     in_subprocess=False):
  if name == 'reverie':
    return iter(client.dataset(TABLE, batch_size,
                               max_in_flight_samples_per_worker=512,
                               prefetch=2, in_subprocess=in_subprocess))
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ds = mod.TrajectoryDataset(
      address, TABLE, max_in_flight_samples_per_worker=512,
      dtypes={'features': tf.float32},
      shapes={'features': tf.TensorShape([FEATURES])})
  return ds.batch(batch_size, drop_remainder=True).prefetch(2).as_numpy_iterator()


def main(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument('--client', choices=('reverie', 'dm-reverb'), required=True)
  p.add_argument('--address', required=True)
  p.add_argument('--server-pid', type=int, default=None)
  p.add_argument('--steps', type=int, default=20000)
  p.add_argument('--batches', type=int, default=300)
  p.add_argument('--warmup', type=int, default=20)
  p.add_argument('--batch-size', type=int, default=256)
  p.add_argument('--learner-ms', type=float, default=5.0)
  args = p.parse_args(argv[1:])

  if args.client == 'reverie':
    import reverie as mod  # pylint: disable=g-import-not-at-top
    version = mod.__version__
  else:
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    import reverb as mod  # pylint: disable=g-import-not-at-top
    import importlib.metadata  # pylint: disable=g-import-not-at-top
    version = importlib.metadata.version('dm-reverb')
  client = mod.Client(args.address)
  client.server_info(timeout=30)

  run, writer = bench_writes(client, args.steps)
  w_wall, w_cpu, w_server, w_caller = _measure(run, args.server_pid)
  writer.close()
  size = client.server_info(timeout=30)[TABLE].current_size

  def learner_step(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
      pass

  def sampling(in_subprocess=False, learner_s=0.0):
    """Wall, process CPU and server CPU seconds of --batches batches."""
    it = dataset_iterator(args.client, mod, client, args.address,
                          args.batch_size, in_subprocess)
    for _ in range(args.warmup):
      batch = next(it)
      learner_step(learner_s)

    def sample():
      for _ in range(args.batches):
        next(it)
        learner_step(learner_s)

    wall, cpu, server, _ = _measure(sample, args.server_pid)
    features = batch.data['features'] if isinstance(batch.data, dict) else (
        batch.data[0])
    assert features.shape == (args.batch_size, FEATURES), features.shape
    assert features.dtype == np.float32
    if hasattr(it, 'close'):
      it.close()
    return wall, cpu, server

  s_wall, s_cpu, s_server = sampling()
  learner_s = args.learner_ms / 1e3
  busy = {'busy_batches_per_s': args.batches / sampling(
      learner_s=learner_s)[0]}
  if args.client == 'reverie':
    busy['subprocess_batches_per_s'] = args.batches / sampling(True)[0]
    busy['busy_subprocess_batches_per_s'] = args.batches / sampling(
        True, learner_s)[0]

  print(json.dumps({
      'client': args.client,
      'version': version,
      'python': sys.version.split()[0],
      'steps': args.steps,
      'items_in_table': size,
      'write_steps_per_s': args.steps / w_wall,
      'write_cpu_us_per_step': w_cpu / args.steps * 1e6,
      'write_caller_cpu_us_per_step': w_caller / args.steps * 1e6,
      'write_server_cpu_us_per_step': w_server / args.steps * 1e6,
      'batches': args.batches,
      'batch_size': args.batch_size,
      'batches_per_s': args.batches / s_wall,
      'sample_cpu_ms_per_batch': s_cpu / args.batches * 1e3,
      'sample_server_cpu_ms_per_batch': s_server / args.batches * 1e3,
      'learner_ms': args.learner_ms,
      **busy,
  }), flush=True)
  sys.stdout.flush()
  os._exit(0)  # dm-reverb's and TF's threads can delay a normal exit


if __name__ == '__main__':
  main(sys.argv)
