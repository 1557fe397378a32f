"""Load generator on DeepMind's dm-reverb Python client, the twin of `reverie bench`.

    py=$(scripts/reverb-env.sh)
    "$py" bench/reverb_client_driver.py --addr 127.0.0.1:PORT --table replay \
        --mode insert --payload 400 --clients 1,8 --duration 2 [--server-pid PID]

Same workload as `reverie bench` (cmd/reverie/bench.go): one float32 tensor
of random values per item (`--payload` bytes), one step per item, chunks of
one step. Clients are threads of this one process, each with its own
`reverb.Client` (the C++ client releases the GIL while it waits on the
network, but Python code between calls holds it, so at small payloads this
process, not the server, is usually the limit: see docs/benchmarks.md).

  insert  each client: `client.trajectory_writer(num_keep_alive_refs=1)`,
          `append` + `create_item` per item; at most 48 unconfirmed items,
          kept with `flush(block_until_num_items=48)` (reverie's Go writer
          allows 128, but dm-reverb's writer logs a warning from 50 pending
          items on, and the logging itself slows the client down).
          Latency per item: from the start of its `append` to the return of
          the first `flush` after which it is confirmed (an upper bound of
          its confirmation time, as the client does not report each one).
  sample  each client: one dm-reverb Sampler (`Client._client.NewSampler`,
          what `client.sample` uses, with 16 samples in flight per worker as
          `reverie bench --in-flight 16`, instead of `client.sample`'s 1).
          Latency per item: one `GetNextTrajectory` call.
  mixed   half the clients insert, half sample (rounded as reverie bench),
          at once, for a fixed time; the process then exits without waiting
          for blocked calls (a Queue table can leave samplers blocked), so
          give it one client count per invocation.

For `sample` and `mixed` the table is first prefilled (not counted) up to
min(1000 items, 64 MB) as reverie bench does, if it holds less.

Actors in Acme and learners' samplers usually run in processes of their
own. `--procs P` runs the clients in P worker processes instead (forked
once from this process after it imported TensorFlow, before any client or
channel exists, then given every run in turn), spread as
evenly as the client count allows, all measuring one window: the report is
their sum, with latencies from their merged histograms and the client CPU
of all of them. `--start-at` lets several driver processes, started
together, measure one window (bench/py-ab.sh).

`--zygote` (alone) serves many invocations from one process: see zygote().

With several `--clients` values (and `--target`s, and `--reps`) the runs are
made one after another in this process (so TensorFlow is imported once). Each prints one JSON line with the
fields of `reverie bench --json` (`insert`/`sample`: items, bytes, seconds,
items_per_sec, mb_per_sec, p50_ms, p99_ms, ...). With --server-pid the line
also has `server`: the server's CPU seconds and peak RSS over the run, read
from /proc (bench/procstat.py), the run being the measured window plus the
final flush of writers.
"""

import argparse
import json
import math
import os
import resource
import sys
import threading
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # pylint: disable=g-import-not-at-top
import procstat  # pylint: disable=g-import-not-at-top
import reverb  # pylint: disable=g-import-not-at-top
from reverb import pybind  # pylint: disable=g-import-not-at-top

COLUMN = 'payload'
MAX_IN_FLIGHT_ITEMS = 48
INSERT_NOTE = ('per item: from the start of append to the return of the first '
               'flush(block_until_num_items=48) that confirms it')
SAMPLE_NOTE = ('per item: one Sampler.GetNextTrajectory call (samples are '
               'prefetched, --in-flight per client)')


class Histogram:
  """Latencies in 1%-wide logarithmic buckets, like reverie bench's."""

  BASE = math.log(1.01)

  def __init__(self):
    self.counts = {}
    self.n = 0
    self.lo = math.inf
    self.hi = 0.0

  def record(self, sec):
    sec = max(sec, 1e-9)
    b = int(math.log(sec * 1e9) / self.BASE)
    self.counts[b] = self.counts.get(b, 0) + 1
    self.n += 1
    self.lo = min(self.lo, sec)
    self.hi = max(self.hi, sec)

  def merge(self, other):
    for b, c in other.counts.items():
      self.counts[b] = self.counts.get(b, 0) + c
    self.n += other.n
    self.lo = min(self.lo, other.lo)
    self.hi = max(self.hi, other.hi)

  def quantile_ms(self, q):
    if not self.n:
      return 0.0
    rank = max(math.ceil(q * self.n), 1)
    cum = 0
    for b in sorted(self.counts):
      cum += self.counts[b]
      if cum >= rank:
        sec = math.exp((b + 0.5) * self.BASE) / 1e9
        return min(max(sec, self.lo), self.hi) * 1e3
    return self.hi * 1e3


def payloads(nbytes, seed, n=8):
  rng = np.random.default_rng(seed)
  return [rng.random(nbytes // 4, dtype=np.float32) for _ in range(n)]


class Stats:

  def __init__(self):
    self.hist = Histogram()
    self.items = 0
    self.bytes = 0
    self.errors = 0
    self.end = None  # time.monotonic() when the client finished


def writer_loop(client, table, payload, stop, st, seed, claimed=None):
  data = payloads(payload, seed)
  starts = []  # start times of items not yet known to be confirmed
  try:
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
      i = 0
      while not stop.is_set():
        t = time.monotonic()
        w.append({COLUMN: data[i % len(data)]})
        w.create_item(table, 1.0, {COLUMN: w.history[COLUMN][-1]})
        starts.append(t)
        i += 1
        if len(starts) > MAX_IN_FLIGHT_ITEMS:
          w.flush(block_until_num_items=MAX_IN_FLIGHT_ITEMS)
          now = time.monotonic()
          done = len(starts) - MAX_IN_FLIGHT_ITEMS
          for s in starts[:done]:
            st.hist.record(now - s)
          del starts[:done]
          st.items += done
      w.flush()
      now = time.monotonic()
      for s in starts:
        st.hist.record(now - s)
      st.items += len(starts)
  except Exception as e:  # pylint: disable=broad-except
    st.errors += 1
    print(f'reverb_client_driver: writer: {e}', file=sys.stderr, flush=True)
  st.bytes = st.items * (payload // 4 * 4)
  st.end = time.monotonic()


def sampler_loop(sampler, stop, st):
  ninfo = pybind.Sampler.NUM_INFO_TENSORS
  try:
    while not stop.is_set():
      t = time.monotonic()
      sample = sampler.GetNextTrajectory()
      st.hist.record(time.monotonic() - t)
      st.items += 1
      st.bytes += sum(a.nbytes for a in sample[ninfo:])
  except Exception as e:  # pylint: disable=broad-except
    st.errors += 1
    print(f'reverb_client_driver: sampler: {e}', file=sys.stderr, flush=True)
  st.end = time.monotonic()


def prefill(addr, table, payload):
  client = reverb.Client(addr)
  info = client.server_info()[table]
  target = max(1, min(1000, (64 << 20) // payload))
  target = max(target, info.rate_limiter_info.min_size_to_sample)
  target = min(target, info.max_size)
  n = target - info.current_size
  if n <= 0:
    return 0
  data = payloads(payload, 0)
  with client.trajectory_writer(num_keep_alive_refs=1) as w:
    for i in range(n):
      w.append({COLUMN: data[i % len(data)]})
      w.create_item(table, 1.0, {COLUMN: w.history[COLUMN][-1]})
      if i % 100 == 99:
        w.flush(block_until_num_items=MAX_IN_FLIGHT_ITEMS)
    w.flush()
  return n


def kind_report(clients, stats, start):
  h = Histogram()
  items = nbytes = errors = 0
  end = start
  for st in stats:
    h.merge(st.hist)
    items += st.items
    nbytes += st.bytes
    errors += st.errors
    end = max(end, st.end or start)
  sec = end - start
  return {
      'clients': clients,
      'items': items,
      'bytes': nbytes,
      'seconds': sec,
      'items_per_sec': items / sec if sec > 0 else 0.0,
      'mb_per_sec': nbytes / sec / 1e6 if sec > 0 else 0.0,
      'p50_ms': h.quantile_ms(0.5),
      'p99_ms': h.quantile_ms(0.99),
      'p999_ms': h.quantile_ms(0.999),
      'max_ms': h.hi * 1e3,
      'errors': errors,
  }


def split(mode, clients):
  """(writers, samplers) for a client count."""
  if mode == 'sample':
    return 0, clients
  if mode == 'mixed':
    return (clients + 1) // 2, clients // 2
  return clients, 0


def run(args, clients, addr, server_pid, target, metrics_port=0):
  writers, samplers = split(args.mode, clients)
  prefilled = prefill(addr, args.table, args.payload) if samplers else 0

  stop = threading.Event()
  wclients = [reverb.Client(addr) for _ in range(writers)]
  scl = [reverb.Client(addr) for _ in range(samplers)]
  # Samplers start streaming as soon as they are made: make them inside
  # the window.
  wstats = [Stats() for _ in range(writers)]
  sstats = [Stats() for _ in range(samplers)]
  late = None
  gc0 = procstat.gc_counters(metrics_port)  # outside the window
  if args.start_at:
    # Several driver processes measure one window together (bench/py-ab.sh).
    late = time.time() - args.start_at
    time.sleep(max(0.0, -late))
  window = procstat.Window(server_pid).start()
  ru0 = resource.getrusage(resource.RUSAGE_SELF)
  start = time.monotonic()
  threads = []
  for i, c in enumerate(wclients):
    threads.append(threading.Thread(
        target=writer_loop,
        args=(c, args.table, args.payload, stop, wstats[i], i + 1),
        daemon=True))
  for i, c in enumerate(scl):
    smp = c._client.NewSampler(args.table, -1, args.in_flight)  # pylint: disable=protected-access
    threads.append(threading.Thread(
        target=sampler_loop, args=(smp, stop, sstats[i]), daemon=True))
  for t in threads:
    t.start()
  time.sleep(args.duration)
  stop.set()
  if args.mode == 'mixed':
    # Blocked calls may never return (a full or empty Queue): take the
    # figures now; the process exits after printing them.
    now = time.monotonic()
    for st in wstats + sstats:
      st.end = now
      if st in wstats:
        st.bytes = st.items * (args.payload // 4 * 4)
  else:
    for t in threads:
      t.join()
  server = window.stop()
  ru1 = resource.getrusage(resource.RUSAGE_SELF)
  if server:
    server['client_cpu_sec'] = round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 3)
  procstat.add_gc(server, gc0, procstat.gc_counters(metrics_port) if gc0 else None)

  rep = report(args, target, addr, clients, prefilled, 'dm-reverb 0.14.0 (Python, threads)',
               wstats, sstats, start, late, server)
  print(json.dumps(rep), flush=True)
  if args.mode == 'mixed':
    sys.stderr.flush()
    os._exit(0)  # pylint: disable=protected-access
  return rep['errors']


def report(args, target, addr, clients, prefilled, desc, wstats, sstats, start, late, server):
  """The JSON report of one run; stats' ends are on start's clock."""
  rep = {
      'mode': args.mode,
      'target': target,
      'addr': addr,
      'table': args.table,
      'payload_bytes': args.payload // 4 * 4,
      'compressible': False,
      'chunk_length': 1,
      'clients': clients,
      'in_flight': args.in_flight,
      'duration_sec': args.duration,
      'prefilled': prefilled,
      'client_desc': desc,
      'latency_definition': {},
  }
  if wstats:
    rep['insert'] = kind_report(len(wstats), wstats, start)
    rep['latency_definition']['insert'] = INSERT_NOTE
  if sstats:
    rep['sample'] = kind_report(len(sstats), sstats, start)
    rep['latency_definition']['sample'] = SAMPLE_NOTE
  if late is not None:
    rep['start_late_sec'] = round(max(0.0, late), 3)
  rep['errors'] = sum(rep[k]['errors'] for k in ('insert', 'sample') if k in rep)
  if server:
    rep['server'] = server
  return rep


# --- several processes (--procs) ---------------------------------------------


def worker_main():
  """A worker of --procs: reads one run per line on stdin (JSON: addr,
  table, payload, writers, samplers, in_flight, duration, start_at, seed),
  runs its clients as threads from start_at for duration, and answers with
  one JSON line: per client its latency histogram, items, bytes, errors and
  end (wall-clock seconds), the window's start, and this process's CPU
  seconds over it. Ends at the end of its input."""
  print(json.dumps({'ready': True}), flush=True)
  for line in sys.stdin:
    spec = json.loads(line)
    stop = threading.Event()
    wclients = [reverb.Client(spec['addr']) for _ in range(spec['writers'])]
    scl = [reverb.Client(spec['addr']) for _ in range(spec['samplers'])]
    wstats = [Stats() for _ in wclients]
    sstats = [Stats() for _ in scl]
    time.sleep(max(0.0, spec['start_at'] - time.time()))
    wall0, start = time.time(), time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    threads = [threading.Thread(target=writer_loop,
                                args=(c, spec['table'], spec['payload'], stop, wstats[i], spec['seed'] + i),
                                daemon=True)
               for i, c in enumerate(wclients)]
    for i, c in enumerate(scl):
      smp = c._client.NewSampler(spec['table'], -1, spec['in_flight'])  # pylint: disable=protected-access
      threads.append(threading.Thread(target=sampler_loop, args=(smp, stop, sstats[i]), daemon=True))
    for t in threads:
      t.start()
    time.sleep(spec['duration'])
    stop.set()
    for t in threads:
      t.join()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)

    def dump(st):
      return {'counts': st.hist.counts, 'n': st.hist.n, 'lo': st.hist.lo, 'hi': st.hist.hi,
              'items': st.items, 'bytes': st.bytes, 'errors': st.errors,
              'end': wall0 + ((st.end or start) - start)}

    print(json.dumps({'start': wall0, 'late': wall0 - spec['start_at'],
                      'cpu_sec': ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime,
                      'writers': [dump(st) for st in wstats],
                      'samplers': [dump(st) for st in sstats]}), flush=True)
    del wclients, scl
  return 0


def load_stats(d):
  st = Stats()
  st.hist.counts = {int(b): c for b, c in d['counts'].items()}
  st.hist.n, st.hist.lo, st.hist.hi = d['n'], d['lo'], d['hi']
  st.items, st.bytes, st.errors, st.end = d['items'], d['bytes'], d['errors'], d['end']
  return st


class _Worker:
  """One --procs worker: a child forked from this process, running
  worker_main with its stdin and stdout on pipes to the parent."""

  def __init__(self, others):
    from_parent, to_child = os.pipe()  # (read end, write end)
    from_child, to_parent = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: no client, channel or TensorFlow runtime yet
      code = 1
      try:
        os.close(to_child)
        os.close(from_child)
        for other in others:  # the parent's ends of earlier workers' pipes
          other.stdin.close()
          other.stdout.close()
        sys.stdin = os.fdopen(from_parent, 'r')
        sys.stdout = os.fdopen(to_parent, 'w')
        code = worker_main()
        sys.stdout.flush()
      finally:
        os._exit(code)  # pylint: disable=protected-access
    os.close(from_parent)
    os.close(to_parent)
    self.pid = pid
    self.stdin = os.fdopen(to_child, 'w')
    self.stdout = os.fdopen(from_child, 'r')

  def wait(self):
    _, status = os.waitpid(self.pid, 0)
    return os.waitstatus_to_exitcode(status)


class Workers:
  """--procs worker processes, forked from this one: importing TensorFlow
  once instead of in each worker saves about 40 s of 8 workers' start on
  two cores."""

  def __init__(self, n):
    self.procs = []
    for _ in range(n):
      self.procs.append(_Worker(self.procs))
    for p in self.procs:
      if json.loads(self._read(p)).get('ready') is not True:
        raise RuntimeError('reverb_client_driver: a worker did not start')

  @staticmethod
  def _read(p):
    line = p.stdout.readline()
    if not line:
      raise RuntimeError(f'reverb_client_driver: worker {p.pid} ended (exit {p.wait()})')
    return line

  def close(self):
    for p in self.procs:
      p.stdin.close()
    for p in self.procs:
      p.wait()

  def run(self, args, clients, addr, server_pid, target, metrics_port=0):
    """run(), with the clients spread over the workers."""
    writers, samplers = split(args.mode, clients)
    prefilled = prefill(addr, args.table, args.payload) if samplers else 0
    n = len(self.procs)
    # Connecting takes a few milliseconds per client; samplers start
    # streaming when made, so they are made inside the window, as in run().
    start_at = time.time() + 0.5 + 0.05 * clients
    gc0 = procstat.gc_counters(metrics_port)  # outside the window
    busy = []
    for i, p in enumerate(self.procs):
      w = writers // n + (i < writers % n)
      s = samplers // n + (i < samplers % n)
      if not (w or s):
        continue
      spec = {'addr': addr, 'table': args.table, 'payload': args.payload,
              'writers': w, 'samplers': s, 'in_flight': args.in_flight,
              'duration': args.duration, 'start_at': start_at, 'seed': 1 + 1000 * i}
      p.stdin.write(json.dumps(spec) + '\n')
      p.stdin.flush()
      busy.append(p)
    time.sleep(max(0.0, start_at - time.time()))
    window = procstat.Window(server_pid).start()
    outs = [json.loads(self._read(p)) for p in busy]
    server = window.stop()
    if server:
      server['client_cpu_sec'] = round(sum(o['cpu_sec'] for o in outs), 3)
    procstat.add_gc(server, gc0, procstat.gc_counters(metrics_port) if gc0 else None)
    start = min(o['start'] for o in outs)
    late = max(o['late'] for o in outs)
    wstats = [load_stats(d) for o in outs for d in o['writers']]
    sstats = [load_stats(d) for o in outs for d in o['samplers']]
    rep = report(args, target, addr, clients, prefilled,
                 f'dm-reverb 0.14.0 (Python, {len(busy)} processes)', wstats, sstats, start, late, server)
    rep['procs'] = len(busy)
    print(json.dumps(rep), flush=True)
    return rep['errors']


def main(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument('--addr', help='host:port of the server')
  p.add_argument('--table', default='replay')
  p.add_argument('--mode', default='insert',
                 help='insert, sample or mixed; or a comma-separated list of '
                 'insert and sample, run one after the other (with --procs, '
                 'by the same worker processes)')
  p.add_argument('--payload', type=int, default=400,
                 help='payload bytes per item (a multiple of 4)')
  p.add_argument('--clients', default='1',
                 help='client count, or a comma-separated list of counts to '
                 'run one after another')
  p.add_argument('--duration', type=float, default=2.0,
                 help='seconds of load per run')
  p.add_argument('--in-flight', type=int, default=16,
                 help='samples in flight per sampler')
  p.add_argument('--server-pid', type=int, default=0,
                 help='server process to measure (CPU seconds, peak RSS)')
  p.add_argument('--target', action='append', default=[],
                 metavar='NAME,HOST:PORT,PID[,METRICS_PORT]',
                 help='instead of --addr/--server-pid: a server to drive, '
                 'repeatable; runs alternate between the targets (for each '
                 'client count and repetition, every target in turn, the '
                 'order rotating), so that background load hits them alike. '
                 'With a metrics port (reverie serve --metrics on loopback; 0 '
                 'for none) each run also counts the collections of reverie\'s '
                 'garbage collector that end in it')
  p.add_argument('--reps', type=int, default=1,
                 help='runs per client count and target')
  p.add_argument('--start-at', type=float, default=0,
                 help='wall-clock time (seconds since the epoch) at which '
                 'the measured window starts, after connecting and '
                 'prefilling, so that several driver processes started '
                 'together measure the same window; needs one client '
                 'count, one target and one rep')
  p.add_argument('--procs', type=int, default=1,
                 help='run the clients in this many worker processes (see above)')
  args = p.parse_args(argv[1:])
  targets = []
  for t in args.target:
    name, addr, pid, *metrics = t.split(',')
    targets.append((name, addr, int(pid), int(metrics[0]) if metrics else 0))
  if args.addr:
    targets.append(('server', args.addr, args.server_pid, 0))
  if not targets:
    p.error('give --addr or --target')
  counts = [int(c) for c in args.clients.split(',')]
  modes = args.mode.split(',')
  if any(m not in ('insert', 'sample', 'mixed') for m in modes):
    p.error(f'--mode: want insert, sample or mixed, got {args.mode!r}')
  if len(modes) > 1 and 'mixed' in modes:
    p.error('--mode mixed cannot be listed with other modes')
  if len(modes) > 1 and args.start_at:
    p.error('--start-at takes one --mode')
  args.mode = modes[0]
  if args.mode == 'mixed' and (len(counts) != 1 or len(targets) != 1 or args.reps != 1):
    p.error('--mode mixed takes one --clients value, one target, one rep')
  if args.start_at and (len(counts) != 1 or len(targets) != 1 or args.reps != 1):
    p.error('--start-at takes one --clients value, one target, one rep')
  if args.mode == 'mixed' and counts[0] < 2:
    p.error('--mode mixed needs at least 2 clients')
  if args.procs < 1:
    p.error('--procs must be at least 1')
  if args.procs > 1 and (args.mode == 'mixed' or args.start_at):
    p.error('--procs does not go with --mode mixed or --start-at')
  workers = Workers(args.procs) if args.procs > 1 else None
  errors = 0
  turn = 0
  try:
    for mode in modes:
      args.mode = mode
      for n in counts:
        for _ in range(args.reps):
          order = targets[turn % len(targets):] + targets[:turn % len(targets)]
          turn += 1
          for name, addr, pid, metrics_port in order:
            errors += (workers.run if workers else run)(args, n, addr, pid, name, metrics_port)
  finally:
    if workers:
      workers.close()
  return 1 if errors else 0


def zygote():
  """`--zygote`: serve invocations of this driver from one process that
  imported TensorFlow once (about 6 s on two cores; bench/run.py calls the
  driver ten times in a full run). Each line of stdin is a JSON request
  {"argv": [...], "out": path, "err": path}; for each, a child forked from
  this process (which never makes a client or channel) runs main(argv)
  with its stdout and stderr in those files. This process answers each
  request with a line {"pid": N} as the child starts and {"rc": code}
  when it ends (killed: 128 + the signal), so that the caller can kill a
  child that outlives its timeout."""
  for line in sys.stdin:
    if not line.strip():
      continue
    req = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      code = 1
      try:
        out = os.open(req['out'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(req['err'], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdin = open(os.devnull)  # pylint: disable=consider-using-with
        try:
          code = main(['reverb_client_driver.py'] + req['argv']) or 0
        except SystemExit as e:
          code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # pylint: disable=broad-except
          import traceback  # pylint: disable=g-import-not-at-top
          traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
      finally:
        os._exit(code)  # pylint: disable=protected-access
    print(json.dumps({'pid': pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    print(json.dumps({'rc': code if code >= 0 else 128 - code}), flush=True)
  return 0


if __name__ == '__main__':
  if sys.argv[1:] == ['--zygote']:
    sys.exit(zygote())
  sys.exit(main(sys.argv))
