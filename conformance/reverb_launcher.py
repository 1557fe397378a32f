"""Serves tables described in reverie's YAML config format with Reverb's own server.

    py=$(scripts/reverb-env.sh)
    "$py" conformance/reverb_launcher.py conformance/configs/go_client.yaml

reads the `tables` of a reverie config file (YAML, or JSON, which is YAML;
docs/config.md describes the format), builds the equivalent `reverb.Table`s
and starts `reverb.Server` with them. Once the server accepts connections it
prints one line, `port=PORT`, on stdout (and flushes it); everything else goes
to stderr. It serves until SIGTERM or SIGINT, or until its standard input
reaches end of file when started with --stdin-eof (so that a parent that dies
takes the server with it), then stops the server and exits 0.

The same file configures `reverie serve --config FILE`, so both servers hold
the same tables. `port` and `listen` in the file are ignored: --port picks the
port (default: a free one). Reverb's server always binds `[::]:PORT`; run it
in a private network namespace (`unshare -n`, as scripts/conformance.sh does)
to keep it off every interface but loopback.

Only the features the conformance configs use need to be right, but every
form of docs/config.md's YAML format is translated: the selectors, the seven
rate limiter forms, `queue:`/`stack:` shorthands, `max_times_sampled` and
nested signatures (mappings, lists, tuples and tensor specs).
"""

import argparse
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import yaml  # pylint: disable=g-import-not-at-top

DBL_MAX = sys.float_info.max

_TABLE_KEYS = {'name', 'sampler', 'remover', 'max_size', 'max_times_sampled',
               'rate_limiter', 'queue', 'stack', 'signature'}


class ConfigError(ValueError):
  pass


def _clamp(v):
  """Infinite diffs become +-DBL_MAX, as reverie stores them."""
  v = float(v)
  if v == float('inf'):
    return DBL_MAX
  if v == float('-inf'):
    return -DBL_MAX
  return v


def _selector(reverb, spec, path):
  if isinstance(spec, str):
    simple = {
        'fifo': reverb.selectors.Fifo,
        'lifo': reverb.selectors.Lifo,
        'uniform': reverb.selectors.Uniform,
        'min_heap': reverb.selectors.MinHeap,
        'max_heap': reverb.selectors.MaxHeap,
    }
    if spec in simple:
      return simple[spec]()
  if isinstance(spec, dict) and set(spec) == {'prioritized'}:
    return reverb.selectors.Prioritized(
        float(spec['prioritized']['priority_exponent']))
  raise ConfigError(f'{path}: unsupported selector {spec!r}')


def _rate_limiter(reverb, spec, path):
  rl = reverb.rate_limiters
  if not isinstance(spec, dict) or not spec:
    raise ConfigError(f'{path}: want a mapping, got {spec!r}')
  if set(spec) == {'min_size'}:
    return rl.MinSize(int(spec['min_size']))
  if set(spec) == {'queue'}:
    return rl.Queue(int(spec['queue']))
  if set(spec) == {'stack'}:
    return rl.Stack(int(spec['stack']))
  if set(spec) == {'sample_to_insert_ratio'}:
    r = spec['sample_to_insert_ratio']
    spi = float(r['samples_per_insert'])
    n = int(r['min_size_to_sample'])
    if 'error_buffer' in r:
      e = r['error_buffer']
      if isinstance(e, (list, tuple)):
        e = (_clamp(e[0]), _clamp(e[1]))
      else:
        e = _clamp(e)
    else:
      e = (_clamp(r['min_diff']), _clamp(r['max_diff']))
    return rl.SampleToInsertRatio(spi, n, e)
  generic = {'samples_per_insert', 'min_size_to_sample', 'min_diff',
             'max_diff'}
  if set(spec) == generic:

    class Generic(rl.RateLimiter):
      pass

    return Generic(float(spec['samples_per_insert']),
                   int(spec['min_size_to_sample']),
                   _clamp(spec['min_diff']), _clamp(spec['max_diff']))
  raise ConfigError(f'{path}: unsupported rate limiter {spec!r}')


def _signature(tf, spec, path):
  """A reverie YAML signature as a nest of tf.TensorSpec."""
  if isinstance(spec, list):
    return [_signature(tf, s, f'{path}[{i}]') for i, s in enumerate(spec)]
  if not isinstance(spec, dict):
    raise ConfigError(f'{path}: want a mapping or a list, got {spec!r}')
  if 'dtype' in spec:
    extra = set(spec) - {'dtype', 'shape', 'name'}
    if extra:
      raise ConfigError(f'{path}: unknown keys {sorted(extra)}')
    dtype = tf.string if spec['dtype'] == 'string' else tf.as_dtype(
        spec['dtype'])
    shape = spec.get('shape')
    if shape is not None:
      shape = [None if d is None or d == -1 else int(d) for d in shape]
    return tf.TensorSpec(shape, dtype, name=spec.get('name'))
  if set(spec) == {'tuple'} and isinstance(spec['tuple'], list):
    return tuple(
        _signature(tf, s, f'{path}.tuple[{i}]')
        for i, s in enumerate(spec['tuple']))
  return {k: _signature(tf, v, f'{path}.{k}') for k, v in spec.items()}


def tables_from_config(config):
  """The reverb.Table list for a parsed reverie config (a dict)."""
  import reverb  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  tables = []
  for i, t in enumerate(config.get('tables') or []):
    path = f'tables[{i}]'
    unknown = set(t) - _TABLE_KEYS
    if unknown:
      raise ConfigError(f'{path}: unknown keys {sorted(unknown)}')
    name = t['name']
    signature = None
    if t.get('signature') is not None:
      signature = _signature(tf, t['signature'], f'{path}.signature')
    if t.get('queue') is not None:
      tables.append(reverb.Table.queue(name, int(t['queue']),
                                       signature=signature))
      continue
    if t.get('stack') is not None:
      tables.append(reverb.Table.stack(name, int(t['stack']),
                                       signature=signature))
      continue
    tables.append(
        reverb.Table(
            name=name,
            sampler=_selector(reverb, t['sampler'], f'{path}.sampler'),
            remover=_selector(reverb, t['remover'], f'{path}.remover'),
            max_size=int(t['max_size']),
            rate_limiter=_rate_limiter(reverb, t['rate_limiter'],
                                       f'{path}.rate_limiter'),
            max_times_sampled=int(t.get('max_times_sampled') or 0),
            signature=signature))
  if not tables:
    raise ConfigError('no tables')
  return tables


def _wait_for_port(port, timeout_s):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    for host in ('127.0.0.1', '::1'):
      try:
        with socket.create_connection((host, port), timeout=1):
          return True
      except OSError:
        pass
    time.sleep(0.05)
  return False


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('config', help='reverie YAML/JSON config file')
  parser.add_argument('--port', type=int, default=None,
                      help='port to serve on (default: a free one)')
  parser.add_argument('--stdin-eof', action='store_true',
                      help='also stop when standard input is closed')
  args = parser.parse_args(argv[1:])

  with open(args.config) as f:
    config = yaml.safe_load(f)
  tables = tables_from_config(config)

  import reverb  # pylint: disable=g-import-not-at-top

  stop = threading.Event()
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: stop.set())

  # Reverb's default checkpointer makes a directory under /tmp per server;
  # this one is removed on exit.
  ckpt_dir = tempfile.mkdtemp(prefix='reverb_launcher_')
  server = reverb.Server(
      tables=tables, port=args.port,
      checkpointer=reverb.checkpointers.DefaultCheckpointer(path=ckpt_dir))
  if not _wait_for_port(server.port, 30):
    print(f'reverb_launcher: port {server.port} does not accept connections',
          file=sys.stderr, flush=True)
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    os._exit(1)  # pylint: disable=protected-access
  print(f'port={server.port}', flush=True)
  print(f'reverb_launcher: serving {[t.name for t in tables]} on port '
        f'{server.port}', file=sys.stderr, flush=True)

  if args.stdin_eof:

    def watch_stdin():
      try:
        while sys.stdin.buffer.read(4096):
          pass
      except (OSError, ValueError):
        pass
      stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()

  while not stop.wait(0.5):
    pass
  # Blocked writers or samplers can keep Server.stop() waiting: give it a few
  # seconds, then leave without waiting for them.
  stopper = threading.Thread(target=server.stop, daemon=True)
  stopper.start()
  stopper.join(5)
  shutil.rmtree(ckpt_dir, ignore_errors=True)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(0)  # pylint: disable=protected-access


if __name__ == '__main__':
  main(sys.argv)
