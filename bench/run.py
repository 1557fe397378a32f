"""Runs reverie and Reverb side by side on the workloads of issue 7.

Started by bench/bench.sh (`make bench`, `make bench-quick`), which builds
the binaries, sets up .venv-reverb and runs this file with that venv's
python inside a private network namespace that has only a loopback
interface (Reverb's server binds every interface and cannot be told
otherwise), then draws the plots with bench/plot.py.

    python bench/run.py --profile full|quick [--only section5,batched,...]

For every group of tables both servers are started with the same config
file (`reverie serve --config F` and conformance/reverb_launcher.py F) and
stay up together; each configuration is then run against Reverb and
reverie in turn, the order alternating between repetitions, so that
background load on the shared machine hits both alike. The clients:

  go      `reverie bench` (cmd/reverie/bench.go), reverie's Go client
  py      bench/reverb_client_driver.py, DeepMind's dm-reverb Python client
  paced   bench/paced: sample latency at a fixed offered load
  prio    bench/prioritized: Acme-shaped prioritized replay, Go client

and bench/echo, the bare-gRPC ceiling, is run in the same rotation, twice:
bare (server 'echo'), and holding as many payloads as a full section-5
table in memory (server 'echo-table', `echo serve --rings`); and at 40 kB
with 8 clients a third time, holding a table and answering from an
HTTP/2 server of its own instead of gRPC-Go's (server 'echo-h2-table',
`echo serve --rings ... --h2 --handoff`: what a transport of reverie's
own could reach; docs/transport-plan.md). reverie on its own transport
(server 'reverie-own', `reverie serve --transport own`) runs the
section-5 workloads at 400 B and 40 kB (40 kB in the quick profile), at
every client count, beside the default gRPC-Go transport. In the full
profile every server's section-5 table is filled past max_size before
the insert sweep, unmeasured, so that every measured insert evicts (the
quick profile starts its inserts on empty tables). Around
each run the server's CPU seconds (utime+stime from /proc/PID/stat) and
peak RSS (VmHWM from /proc/PID/status, reset before the run through
clear_refs) are read, and the CPU the rest of the machine used (from
/proc/stat, less the server and the client). Results go to
bench/results/<workload>.json (the quick profile: bench/results/quick/),
and markdown tables to tables.md beside them (bench/tables.py).
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import queue
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import procstat  # pylint: disable=g-import-not-at-top
import tables as tables_md  # pylint: disable=g-import-not-at-top

BIN = os.path.join(ROOT, '.bin')
REVERIE = os.path.join(BIN, 'reverie')
TOOLS = os.path.join(BIN, 'bench')
PY = sys.executable  # .venv-reverb's python: it runs the launcher and driver

CLIENTS = [1, 2, 4, 8, 16, 32]
PROFILES = {
    # About 14 minutes on 2 cores (the bound: 15): 864-893 s in the
    # slow runs of 2026-11-27 until the driver forked its worker processes
    # (830 s after), 587-795 s on a quieter host the day before.
    'full': dict(
        reps=2,  # runs per configuration and server; tables show the best
        payloads=[400, 4000, 40000, 400000],
        clients=CLIENTS,
        go_sec=1.0,
        py_payloads=[400, 4000, 40000, 400000],
        py_clients=CLIENTS,
        py_sec=1.2,
        # The dm-reverb client in one process per client, as Acme runs
        # actors (bench/reverb_client_driver.py --procs).
        py_procs=8,
        py_procs_payloads=[400, 40000],
        paced_payloads=[400, 40000],
        paced_sec=2.0,
        batched_clients=[2, 8, 32],
        queue_size=1000,
        queue_clients=[2, 8, 16],
        queue_go_items=12000,
        queue_py_clients=[2, 8],
        queue_py_sec=2.0,
        prio_items=1_000_000,
        prio_sec=3.0,
        echo_payloads=[400, 4000, 40000, 400000],
        echo_table_payloads=[400, 40000],
        echo_h2_payloads=[40000],
        echo_h2_clients=[8],
        own_payloads=[400, 40000],
        one_server=False,
        insert_prefill=True,
    ),
    # Development: about 100 seconds (the bound: 2 minutes).
    'quick': dict(
        reps=1,
        payloads=[400, 40000],
        clients=[1, 8],
        go_sec=1.0,
        py_payloads=[400],
        py_clients=[8],
        py_sec=1.0,
        # Eight processes, as the full run: the driver forks them after
        # importing TensorFlow once.
        py_procs=8,
        py_procs_payloads=[400],
        paced_payloads=[400],
        paced_sec=1.5,
        batched_clients=[8],
        queue_size=1000,
        queue_clients=[8],
        queue_go_items=4000,
        queue_py_clients=[8],
        queue_py_sec=1.5,
        prio_items=50_000,
        prio_sec=1.5,
        echo_payloads=[400, 40000],
        echo_table_payloads=[40000],
        echo_h2_payloads=[40000],
        echo_h2_clients=[8],
        own_payloads=[40000],
        one_server=True,
        # Filling the tables first would take most of the 2 minutes:
        # quick inserts start on empty tables.
        insert_prefill=False,
    ),
}
WORKLOADS = ['section5', 'batched', 'queue', 'prioritized', 'echo']
SERVERS = ['reverb', 'reverie']


def log(msg):
  print(f'[{time.strftime("%H:%M:%S")}] {msg}', file=sys.stderr, flush=True)


def max_size(payload):
  """Table capacity: 1M items, or about 1 GB of payload."""
  return min(1_000_000, 1_000_000_000 // payload)


def s5_table(payload):
  return {'name': f's5_{payload}', 'sampler': 'uniform', 'remover': 'fifo',
          'max_size': max_size(payload), 'rate_limiter': {'min_size': 1}}


def queue_table(p):
  return {'name': 'queue', 'queue': p['queue_size']}


def prio_table(p):
  return {'name': 'prioritized',
          'sampler': {'prioritized': {'priority_exponent': 0.6}},
          'remover': 'fifo', 'max_size': max(p['prio_items'], 1),
          'rate_limiter': {'min_size': 1}}


class Server:
  """One server process serving a config file, on loopback."""

  def __init__(self, kind, config, logdir):
    self.kind, self.config = kind, config
    self.log_path = os.path.join(logdir, f'{kind}.{os.path.basename(config)}.log')
    self.proc = None
    self.port = None
    self.metrics_port = None
    # CPU accounting: what the server used from serving to stop, and how
    # much of it fell in windows (measured or not: prefills count too).
    self.cpu_serving = None
    self.windows_cpu = 0.0
    self.info_record = None  # the dict in the results' meta, filled at stop

  def __enter__(self):
    logf = open(self.log_path, 'w')
    t0 = time.monotonic()
    if self.kind in ('reverie', 'reverie-own'):
      extra = ['--transport', 'own'] if self.kind == 'reverie-own' else ['--transport', 'grpc']
      # Metrics on a port of their own, read between runs only (gc()).
      extra += ['--metrics', '127.0.0.1:0']
      self.proc = subprocess.Popen(
          [REVERIE, 'serve', '--config', self.config, '--listen', '127.0.0.1:0'] + extra,
          stdout=logf, stderr=logf, stdin=subprocess.DEVNULL)
      deadline = time.monotonic() + 30
      while self.port is None and time.monotonic() < deadline:
        text = open(self.log_path).read()
        m = re.search(r'reverie serving.* addr=\S*:(\d+) ', text)
        mm = re.search(r'serving metrics.* addr=\S*:(\d+) ', text)
        if m:
          self.port = int(m.group(1))
          self.metrics_port = int(mm.group(1)) if mm else None
        elif self.proc.poll() is not None:
          break
        else:
          time.sleep(0.05)
    else:
      self.proc = subprocess.Popen(
          [PY, os.path.join(ROOT, 'conformance', 'reverb_launcher.py'),
           self.config, '--stdin-eof'],
          stdout=subprocess.PIPE, stderr=logf, stdin=subprocess.PIPE, text=True)
      line = self.proc.stdout.readline()  # port=N, or '' if it died
      if line.startswith('port='):
        self.port = int(line.strip().split('=')[1])
    if self.port is None:
      self.stop()
      raise RuntimeError(f'{self.kind} did not start; see {self.log_path}')
    self.pid = self.proc.pid
    self.startup_sec = time.monotonic() - t0
    self.cpu_serving = procstat.cpu_seconds(self.pid)
    self.idle_rss_mb = round(procstat.status_kb(self.pid, 'VmRSS') / 1024, 1)
    log(f'{self.kind} serving {os.path.basename(self.config)} on 127.0.0.1:{self.port}'
        f' (pid {self.pid}, up in {self.startup_sec:.1f}s, RSS {self.idle_rss_mb} MB)')
    return self

  @property
  def addr(self):
    return f'127.0.0.1:{self.port}'

  def info(self):
    return {'kind': self.kind, 'startup_sec': round(self.startup_sec, 2),
            'idle_rss_mb': self.idle_rss_mb}

  def gc(self):
    """reverie's collector counters (procstat.gc_counters), or None."""
    return procstat.gc_counters(self.metrics_port)

  def stop(self):
    if self.proc and self.proc.poll() is None and self.cpu_serving is not None and self.info_record is not None:
      # CPU outside every window: between runs (a collection finishing
      # after a run, the scavenger, idle threads), the harness's metrics
      # reads (reverie), and the dm-reverb driver's set-up between its
      # runs. The per-run figures do not count it.
      life = procstat.cpu_seconds(self.pid) - self.cpu_serving
      self.info_record['serving_cpu_sec'] = round(life, 3)
      self.info_record['windows_cpu_sec'] = round(self.windows_cpu, 3)
      self.info_record['outside_windows_cpu_sec'] = round(life - self.windows_cpu, 3)
    if self.proc and self.proc.poll() is None:
      self.proc.send_signal(signal.SIGTERM)
      try:
        self.proc.wait(15)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()

  def __exit__(self, *_):
    self.stop()


class EchoServer:
  """bench/echo's server, driven like the others: bare (kind 'echo', the
  bare-gRPC ceiling), or with payloads given holding as many of each size
  as a full section-5 table of them (kind 'echo-table')."""

  def __init__(self, logdir, payloads=(), h2=False):
    self.logdir = logdir
    self.payloads = list(payloads)
    self.h2 = h2
    self.kind = 'echo-h2-table' if h2 else 'echo-table' if self.payloads else 'echo'

  def __enter__(self):
    logf = open(os.path.join(self.logdir, f'{self.kind}.log'), 'w')
    cmd = [os.path.join(TOOLS, 'echo'), 'serve', '--listen', '127.0.0.1:0']
    if self.payloads:
      cmd += ['--rings', ','.join(f'{pl}:{max_size(pl)}' for pl in self.payloads)]
    if self.h2:
      cmd += ['--h2', '--handoff']
    self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=logf, text=True)
    self.port = int(self.proc.stdout.readline().strip().split('=')[1])
    self.pid = self.proc.pid
    self.addr = f'127.0.0.1:{self.port}'
    log(f'{self.kind} serving on {self.addr} (pid {self.pid})')
    return self

  def __exit__(self, *_):
    self.proc.terminate()
    self.proc.wait()


def json_lines(text):
  """The JSON objects of a client's output, one per line starting with {."""
  return [json.loads(line) for line in map(str.strip, text.splitlines())
          if line.startswith('{')]


class Zygote:
  """bench/reverb_client_driver.py --zygote, started on first use: one
  process imports TensorFlow, and every driver invocation is a child forked
  from it, instead of a new interpreter importing it again (about 6 s each,
  ten times in a full run)."""

  def __init__(self, logdir):
    self.logdir = logdir
    self.proc = None
    self.lines = queue.Queue()

  def _start(self):
    log_path = os.path.join(self.logdir, 'zygote.log')
    with open(log_path, 'w') as err:
      self.proc = subprocess.Popen(
          [PY, os.path.join(HERE, 'reverb_client_driver.py'), '--zygote'],
          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    lines = self.lines = queue.Queue()
    out = self.proc.stdout
    def read():
      for line in out:
        lines.put(line)
      lines.put(None)  # ended
    threading.Thread(target=read, daemon=True).start()

  def _reply(self, timeout):
    try:
      line = self.lines.get(timeout=timeout)
    except queue.Empty:
      return None
    if line is None:
      raise RuntimeError(f'the driver zygote exited ({self.proc.wait()}); '
                         'see zygote.log')
    return json.loads(line)

  def run(self, argv, out, err, timeout):
    """Runs the driver with argv, its stdout to out and stderr to err;
    returns its exit code, or None if it was killed after timeout s."""
    if self.proc is None or self.proc.poll() is not None:
      self._start()
    self.proc.stdin.write(json.dumps({'argv': argv, 'out': out, 'err': err}) + '\n')
    self.proc.stdin.flush()
    # The first reply waits for TensorFlow's import as well.
    started = self._reply(300)
    if started is None:
      raise RuntimeError('the driver zygote did not start a run in 300 s')
    done = self._reply(timeout)
    if done is None:
      os.kill(started['pid'], signal.SIGKILL)
      self._reply(60)
      return None
    return done['rc']

  def close(self):
    if self.proc is None:
      return
    self.proc.stdin.close()
    try:
      self.proc.wait(30)
    except subprocess.TimeoutExpired:
      self.proc.kill()
      self.proc.wait()


class Bench:
  """Runs clients against servers and collects the records.

  Both servers (and bench/echo) run at once, idle while the other is
  driven, and every configuration is run against each in turn, the order
  alternating between repetitions: the machine is shared, and background
  load then hits both alike. Tables report the best repetition.
  """

  def __init__(self, profile, outdir):
    self.p = PROFILES[profile]
    self.profile = profile
    self.outdir = outdir
    self.logdir = os.path.join(BIN, 'bench', 'logs')
    os.makedirs(self.logdir, exist_ok=True)
    self.records = {w: [] for w in WORKLOADS}
    self.servers = {}  # kind -> list of server infos
    self.nlog = 0
    self.turn = 0
    self.zygote = Zygote(self.logdir)

  def order(self, servers):
    """The servers in the order of this turn (rotating)."""
    self.turn += 1
    k = self.turn % len(servers)
    return servers[k:] + servers[:k]

  # --- running one client ------------------------------------------------

  def _run(self, cmd, timeout, server=None):
    """Runs cmd; returns (JSON lines of its stdout, server window stats)."""
    self.nlog += 1
    errlog = os.path.join(self.logdir, f'client.{self.nlog:03d}.log')
    gc0 = server.gc() if isinstance(server, Server) else None
    win = procstat.Window(server.pid if server else None).start()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(errlog, 'w') as ef:
      ef.write(' '.join(cmd) + '\n')
      ef.flush()
      try:
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=ef, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL)
      except subprocess.TimeoutExpired:
        log(f'TIMEOUT after {timeout}s: {" ".join(cmd)} (log {errlog})')
        return [], win.stop()
    stats = win.stop()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if stats and isinstance(server, Server):
      server.windows_cpu += stats['cpu_sec']
    if stats:
      stats['client_cpu_sec'] = round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 3)
      procstat.add_gc(stats, gc0, server.gc() if gc0 else None)
    out = json_lines(res.stdout)
    if res.returncode != 0:
      log(f'exit code {res.returncode}: {" ".join(cmd)} (log {errlog})')
    return out, stats

  def _run_driver(self, argv, timeout):
    """Runs the dm-reverb driver with argv through the zygote; returns the
    JSON lines of its stdout."""
    self.nlog += 1
    errlog = os.path.join(self.logdir, f'client.{self.nlog:03d}.log')
    outlog = os.path.join(self.logdir, f'client.{self.nlog:03d}.out')
    with open(errlog, 'w') as ef:
      ef.write('reverb_client_driver.py ' + ' '.join(argv) + '\n')
    rc = self.zygote.run(argv, outlog, errlog, timeout)
    if rc is None:
      log(f'TIMEOUT after {timeout}s: driver {" ".join(argv)} (log {errlog})')
    elif rc != 0:
      log(f'exit code {rc}: driver {" ".join(argv)} (log {errlog})')
    with open(outlog) as f:
      return json_lines(f.read())

  def _record(self, workload, server, client, report, stats, **extra):
    st = report.pop('server', None) or stats  # the driver measures its own window
    if stats is None and st and isinstance(server, Server):
      server.windows_cpu += st['cpu_sec']
    rec = {'workload': workload, 'server': server.kind, 'client': client}
    rec.update(extra)
    rec.update(report)
    rec['client'] = client  # the driver's own description is in client_desc
    rec['server_stats'] = st
    items = sum(report[k]['items'] for k in ('insert', 'sample') if k in report)
    if st and items:
      st['cpu_sec_per_m_items'] = round(st['cpu_sec'] / items * 1e6, 3)
      if 'gc_cpu_sec' in st:
        st['gc_cpu_sec_per_m_items'] = round(st['gc_cpu_sec'] / items * 1e6, 3)
    if st and 'client_cpu_sec' in st and st.get('wall_sec'):
      # CPU that neither this server nor this client used: other processes
      # on the machine (the harness, other users), as a share of all CPUs.
      other = st['machine_busy_sec'] - st['cpu_sec'] - st['client_cpu_sec']
      capacity = st['wall_sec'] * os.cpu_count()
      st['other_cpu_share'] = round(max(other, 0) / capacity, 3)
      # Beside it, what the hypervisor gave to other guests: a noisy host.
      if 'machine_steal_sec' in st:
        st['steal_cpu_share'] = round(st['machine_steal_sec'] / capacity, 3)
    self.records[workload].append(rec)
    self._say(rec)
    return rec

  def go_bench(self, server, workload, table, mode, payload, clients,
               sec=None, items=None, measure=True, extra=(), rep=0):
    cmd = [REVERIE, 'bench', '--addr', server.addr, '--table', table,
           '--mode', mode, '--payload', str(payload), '--clients', str(clients),
           '--json'] + list(extra)
    cmd += ['--items', str(items)] if items else ['--duration', f'{sec}s']
    out, stats = self._run(cmd, timeout=180, server=server)
    if not measure or not out:
      return None
    return self._record(workload, server, 'go', out[0], stats,
                        bench_flags=' '.join(extra), rep=rep)

  def echo_load(self, echo, payload, mode, clients, sec, rep=0):
    cmd = [os.path.join(TOOLS, 'echo'), 'load', '--addr', echo.addr,
           '--mode', mode, '--payload', str(payload), '--clients',
           str(clients), '--duration', f'{sec}s', '--json']
    out, stats = self._run(cmd, timeout=60, server=echo)
    if out:
      self._record('echo', echo, 'go', out[0], stats, rep=rep)

  def py_driver(self, servers, workload, table, mode, payload, clients, sec, reps=1, procs=1):
    """The dm-reverb driver, one invocation for every server and client
    count (and mode, given as a list); with procs > 1 its clients run in
    that many worker processes, recorded as client 'py-procs'."""
    argv = ['--table', table,
            '--mode', mode, '--payload', str(payload), '--clients',
            ','.join(map(str, clients)), '--duration', str(sec), '--reps', str(reps),
            '--procs', str(procs)]
    for srv in servers:
      # The metrics port, if any, lets the driver count collections.
      argv += ['--target', f'{srv.kind},{srv.addr},{srv.pid},{srv.metrics_port or 0}']
    runs = len(mode.split(',')) * len(clients) * len(servers) * reps
    out = self._run_driver(argv, timeout=60 + 30 * (procs > 1) + 10 * runs * sec)
    by_kind = {srv.kind: srv for srv in servers}
    client = 'py-procs' if procs > 1 else 'py'
    turns = {}
    for rep in out:
      kind = rep.pop('target')
      key = (kind, rep['mode'], rep['clients'])
      turns[key] = turns.get(key, -1) + 1
      self._record(workload, by_kind[kind], client, rep, None, rep=turns[key])

  def _say(self, rec):
    parts = []
    for k in ('insert', 'sample'):
      if k in rec:
        r = rec[k]
        parts.append(f'{k} {r["items_per_sec"]:,.0f}/s {r["mb_per_sec"]:.1f} MB/s '
                     f'p50 {r["p50_ms"]:.3g} p99 {r["p99_ms"]:.3g} ms')
    st = rec.get('server_stats') or {}
    log(f'  {rec["server"]:7} {rec["client"]:5} {rec.get("mode", ""):6} '
        f'{rec.get("payload_bytes", "")}B x{rec.get("clients", "")}: '
        + '; '.join(parts)
        + (f'; cpu {st.get("cpu_sec_per_m_items", 0):.2f} s/M, '
           f'peak {st.get("peak_rss_mb", 0):.0f} MB, others {100 * st.get("other_cpu_share", 0):.0f}% '
           f'(steal {100 * st.get("steal_cpu_share", 0):.0f}%)'
           if st else ''))

  # --- workloads ---------------------------------------------------------

  def config(self, name, tables):
    path = os.path.join(self.logdir, f'{name}.yaml')
    with open(path, 'w') as f:
      json.dump({'tables': tables}, f, indent=1)  # JSON is YAML
    return path

  def section5(self, servers, payload):
    """Reverb paper section 5: insert-only and sample-only sweeps."""
    echo, echo_table, echo_h2 = self.echo, self.echo_table, self.echo_h2
    p = self.p
    own = self.own if payload in p['own_payloads'] else None
    table = f's5_{payload}'
    sat = {}
    for mode in ('insert', 'sample'):
      if mode == 'insert' and p['insert_prefill']:
        # Fill every server's table past max_size first, unmeasured, so
        # that each measured insert evicts one item, as in a long run.
        # Otherwise each server's table fills at its own pace during the
        # sweep: the faster one is full (evicting) while the slower one
        # still grows (taking fresh memory), and their CPU per insert
        # compares two different states.
        fill = max_size(payload) * 11 // 10
        for srv in servers + ([own] if own else []):
          self.go_bench(srv, 'section5', table, 'insert', payload, 4, items=fill, measure=False)
      if mode == 'sample':
        # Fill the tables (min(1000 items, 64 MB)) before the sample sweep,
        # unmeasured; after the insert sweep they usually are full already.
        for srv in servers + ([own] if own else []):
          self.go_bench(srv, 'section5', table, 'sample', payload, 1, items=1, measure=False)
      targets = list(servers)
      if echo and payload in p['echo_payloads']:
        targets.append(echo)
      if echo_table and payload in p['echo_table_payloads']:
        targets.append(echo_table)
      for n in p['clients']:
        here = list(targets)
        if echo_h2 and payload in p['echo_h2_payloads'] and n in p['echo_h2_clients']:
          here.append(echo_h2)
        if own:
          # Every client count, as the default server, so that both have
          # the same history: the same table fill at each point.
          here.append(own)
        for rep in range(p['reps']):
          for srv in self.order(here):
            if srv in (echo, echo_table, echo_h2):
              self.echo_load(srv, payload, mode, n, p['go_sec'], rep=rep)
              continue
            rec = self.go_bench(srv, 'section5', table, mode, payload, n, sec=p['go_sec'], rep=rep)
            if rec and mode == 'sample' and srv in servers:  # saturation: the best of the sweep
              sat[srv.kind] = max(sat.get(srv.kind, 0), rec['sample']['items_per_sec'])
    if payload in p['py_payloads']:
      # One driver invocation for both sweeps.
      self.py_driver(servers, 'section5', table, 'insert,sample', payload, p['py_clients'], p['py_sec'])
    if payload in p['py_procs_payloads']:
      # 8 clients in 8 processes, forked from the driver after it imported
      # TensorFlow (importing it in each took eight of them about 40 s).
      self.py_driver(servers, 'section5', table, 'insert,sample', payload, [p['py_procs']],
                     p['py_sec'], reps=p['reps'], procs=p['py_procs'])
    if payload in p['paced_payloads']:
      self.paced(servers, payload, sat)

  def paced(self, servers, payload, sat):
    """Sample latency at half saturation: 8 clients, requests of 16 samples.

    Saturation is a server's best sample items/s with `reverie bench` in
    this sweep. Each server is run at half its own saturation, and both at
    half the lower of the two (the same offered load).
    """
    if len(sat) < len(servers):
      return
    common = 0.5 * min(sat.values())
    runs = []
    for rep in range(self.p['reps']):
      for srv in self.order(servers):
        runs.append((srv, 'own', 0.5 * sat[srv.kind], rep))
      for srv in self.order(servers):
        runs.append((srv, 'common', common, rep))
    for srv, basis, rate, rep in runs:
      cmd = [os.path.join(TOOLS, 'paced'), '--addr', srv.addr, '--table',
             f's5_{payload}', '--rate', f'{rate:.0f}', '--batch', '16',
             '--clients', '8', '--duration', f'{self.p["paced_sec"]}s', '--json']
      out, stats = self._run(cmd, timeout=60, server=srv)
      if out:
        self._record('section5', srv, 'paced', out[0], stats, payload_bytes=payload,
                     rate_basis=basis, saturation_items_per_sec=dict(sat), rep=rep)

  def batched(self, servers):
    """400 B with deeper pipelines than reverie bench's defaults.

    Samplers ask for 256 samples per request (--in-flight 256, default 16)
    and writers keep up to 1024 items unconfirmed (default 128).
    """
    p = self.p
    table = 's5_400'
    for mode, flags in (('insert', ['--max-in-flight-items', '1024']),
                        ('sample', ['--in-flight', '256'])):
      if mode == 'sample':
        for srv in servers:
          self.go_bench(srv, 'batched', table, 'sample', 400, 1, items=1, measure=False)
      for n in p['batched_clients']:
        for rep in range(p['reps']):
          for srv in self.order(servers):
            self.go_bench(srv, 'batched', table, mode, 400, n, sec=p['go_sec'], extra=flags, rep=rep)

  def queue(self, servers):
    p = self.p
    # Prefill (reverie bench fills the queue to min(1000, queue size) items
    # before sampling), unmeasured.
    for srv in servers:
      self.go_bench(srv, 'queue', 'queue', 'mixed', 40000, 2, items=2, measure=False)
    for n in p['queue_clients']:
      for rep in range(p['reps']):
        for srv in self.order(servers):
          self.go_bench(srv, 'queue', 'queue', 'mixed', 40000, n, items=p['queue_go_items'], rep=rep)
    # The driver's mixed mode takes one server per process (it exits
    # without waiting for calls blocked on the queue).
    for n in p['queue_py_clients']:
      for srv in self.order(servers):
        self.py_driver([srv], 'queue', 'queue', 'mixed', 40000, [n], p['queue_py_sec'])

  def prioritized(self, servers):
    p = self.p
    tool = os.path.join(TOOLS, 'prioritized')
    phases = [('insert', ['--items', str(p['prio_items']), '--writers', '4'], 0)]
    phases += [('sample', ['--duration', f'{p["prio_sec"]}s', '--learners', '1'], rep)
               for rep in range(p['reps'])]
    for phase, args, rep in phases:
      for srv in self.order(servers):
        cmd = [tool, '--phase', phase, '--addr', srv.addr, '--table',
               'prioritized', '--json'] + args
        out, stats = self._run(cmd, timeout=600, server=srv)
        if out:
          self._record('prioritized', srv, 'go', out[0], stats, rep=rep)

  def run(self, only):
    p = self.p
    groups = []  # (name, tables, [callables taking the list of servers])
    if p['one_server']:
      tables, steps = [], []
      if 'section5' in only:
        for payload in p['payloads']:
          tables.append(s5_table(payload))
          steps.append(lambda s, pl=payload: self.section5(s, pl))
      if 'batched' in only:
        if 400 not in p['payloads'] or 'section5' not in only:
          tables.append(s5_table(400))
        steps.append(self.batched)
      if 'queue' in only:
        tables.append(queue_table(p))
        steps.append(self.queue)
      if 'prioritized' in only:
        tables.append(prio_table(p))
        steps.append(self.prioritized)
      if tables:
        groups.append(('all', tables, steps))
    else:
      if 'section5' in only:
        for payload in p['payloads']:
          groups.append((f's5_{payload}', [s5_table(payload)],
                         [lambda s, pl=payload: self.section5(s, pl)]))
      if 'batched' in only:
        groups.append(('batched', [s5_table(400)], [self.batched]))
      if 'queue' in only:
        groups.append(('queue', [queue_table(p)], [self.queue]))
      if 'prioritized' in only:
        groups.append(('prioritized', [prio_table(p)], [self.prioritized]))
    self.echo = self.echo_table = self.echo_h2 = None
    with contextlib.ExitStack() as stack:
      if 'echo' in only:
        self.echo = stack.enter_context(EchoServer(self.logdir))
        self.servers['echo'] = [{'kind': 'echo'}]
        if 'section5' in only and p['echo_table_payloads']:
          self.echo_table = stack.enter_context(EchoServer(self.logdir, p['echo_table_payloads']))
          self.servers['echo-table'] = [{'kind': 'echo-table', 'payloads': p['echo_table_payloads']}]
        if 'section5' in only and p['echo_h2_payloads']:
          self.echo_h2 = stack.enter_context(EchoServer(self.logdir, p['echo_h2_payloads'], h2=True))
          self.servers['echo-h2-table'] = [{'kind': 'echo-h2-table', 'payloads': p['echo_h2_payloads'],
                                            'flags': '--h2 --handoff'}]
      for name, tables, steps in groups:
        cfg = self.config(name, tables)
        log(f'== {name}')
        with contextlib.ExitStack() as group:
          servers = [group.enter_context(Server(kind, cfg, self.logdir)) for kind in SERVERS]
          self.own = None
          if 'section5' in only and (name == 'all' or name in {f's5_{pl}' for pl in p['own_payloads']}):
            self.own = group.enter_context(Server('reverie-own', cfg, self.logdir))
          for srv in servers + ([self.own] if self.own else []):
            info = srv.info()
            info['group'] = name
            srv.info_record = info
            self.servers.setdefault(srv.kind, []).append(info)
          for step in steps:
            step(servers)
      if self.echo and 'section5' not in only:
        # The echo sweep alone (with section5 it is interleaved there).
        for payload in p['echo_payloads']:
          for mode in ('insert', 'sample'):
            for n in p['clients']:
              self.echo_load(self.echo, payload, mode, n, p['go_sec'])

  def write(self, only, argv, elapsed):
    os.makedirs(self.outdir, exist_ok=True)
    meta = {
        'profile': self.profile,
        'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
        'command': 'make bench' if self.profile == 'full' else 'make bench-quick',
        'argv': argv,
        'elapsed_sec': round(elapsed, 1),
        'machine': machine(),
        'reverie_commit': git_commit(),
        'servers': self.servers,
        'profile_params': self.p,
    }
    for w in only:
      with open(os.path.join(self.outdir, f'{w}.json'), 'w') as f:
        json.dump({'meta': meta, 'runs': self.records[w]}, f, indent=1)
    md = tables_md.render(self.outdir)
    with open(os.path.join(self.outdir, 'tables.md'), 'w') as f:
      f.write(md)
    log(f'wrote {self.outdir}/*.json and tables.md')


def machine():
  cpu = ''
  try:
    with open('/proc/cpuinfo') as f:
      m = re.search(r'model name\s*:\s*(.*)', f.read())
      cpu = m.group(1) if m else ''
  except OSError:
    pass
  with open('/proc/meminfo') as f:
    total = int(f.readline().split()[1]) // 1024 // 1024
  return {'cpus': os.cpu_count(), 'cpu': cpu, 'mem_gib': total,
          'kernel': platform.release()}


def git_commit():
  try:
    return subprocess.run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'],
                          capture_output=True, text=True).stdout.strip()
  except OSError:
    return ''


def main(argv):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--profile', choices=sorted(PROFILES), default='quick')
  ap.add_argument('--only', default=','.join(WORKLOADS),
                  help='comma-separated workloads: ' + ','.join(WORKLOADS))
  ap.add_argument('--out', help='results directory (default: bench/results, '
                  'or bench/results/quick for the quick profile)')
  args = ap.parse_args(argv[1:])
  only = [w for w in args.only.split(',') if w]
  for w in only:
    if w not in WORKLOADS:
      ap.error(f'unknown workload {w}')
  out = args.out or os.path.join(HERE, 'results', *(['quick'] if args.profile == 'quick' else []))
  for exe in [REVERIE] + [os.path.join(TOOLS, t) for t in ('echo', 'paced', 'prioritized')]:
    if not os.access(exe, os.X_OK):
      ap.error(f'{exe} missing: run bench/bench.sh (make bench), which builds it')
  t0 = time.monotonic()
  b = Bench(args.profile, out)
  log(f'profile {args.profile}: {", ".join(only)}; logs in {b.logdir}')
  try:
    b.run(only)
  finally:
    b.zygote.close()
  b.write(only, argv, time.monotonic() - t0)
  log(f'done in {time.monotonic() - t0:.0f}s')


if __name__ == '__main__':
  main(sys.argv)
