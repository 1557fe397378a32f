"""pytest setup for reverie's Python client.

Starts one server for the session with the tables of
configs/python_client.yaml and hands the tests a ``reverie.Client``:

    pytest python/tests                    # against `reverie serve`
    pytest python/tests --server=reverb    # against Reverb's own server

--server=reverie runs `reverie serve` on 127.0.0.1: the binary named by
$REVERIE_BIN, else .bin/reverie built with `go build` from the repository
root. --server=reverb runs Reverb's server (dm-reverb 0.14.0) through
conformance/reverb_launcher.py with the interpreter of --reverb-python
(default: .venv-reverb/bin/python, made by scripts/reverb-env.sh): the
client under test stays in this interpreter, so it needs no TensorFlow.
Reverb's server binds every interface; python/scripts/test.sh runs that
leg in a private network namespace.

Tests marked ``reverie_only`` (they start and stop servers of their own, or
rely on reverie's documented behaviour) are skipped against Reverb.

Every test runs in a thread with a time limit (TEST_TIMEOUT_S, or
$REVERIE_TEST_TIMEOUT_S): a hang fails the test instead of the suite. The
process leaves with os._exit once pytest has reported, so that a hung
background thread cannot keep it alive.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(HERE, 'configs', 'python_client.yaml')
LAUNCHER = os.path.join(ROOT, 'conformance', 'reverb_launcher.py')

sys.path.insert(0, os.path.join(ROOT, 'conformance'))
from testproc import ServerProcess, popen, reverie_binary, wait_for_port  # pylint: disable=g-import-not-at-top,wrong-import-position

TEST_TIMEOUT_S = float(os.environ.get('REVERIE_TEST_TIMEOUT_S', 30))
START_TIMEOUT_S = 180  # Reverb's launcher imports TensorFlow first

_exit_status = [0]


def pytest_addoption(parser):
  group = parser.getgroup('reverie')
  group.addoption('--server', choices=('reverie', 'reverb'), default='reverie',
                  help='which server the tests talk to (default: reverie)')
  group.addoption('--reverb-python',
                  default=os.path.join(ROOT, '.venv-reverb', 'bin', 'python'),
                  help='interpreter with dm-reverb for --server=reverb')


def pytest_configure(config):
  config.addinivalue_line(
      'markers', 'reverie_only: needs reverie (own servers, or behaviour '
      'Reverb does not have)')


def pytest_report_header(config):
  return f'reverie python tests; server: {config.getoption("--server")}'


def pytest_collection_modifyitems(config, items):
  if config.getoption('--server') != 'reverb':
    return
  skip = pytest.mark.skip(reason='reverie only')
  for item in items:
    if 'reverie_only' in item.keywords:
      item.add_marker(skip)


def free_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def start_reverie(config_path, log_path, listen='127.0.0.1:0',
                  checkpoint_dir=None, extra_args=()):
  """`reverie serve`; its address from its log."""
  args = [reverie_binary(), 'serve', '--config', config_path, '--listen',
          listen]
  if checkpoint_dir:
    args += ['--checkpoint-dir', checkpoint_dir]
  args += list(extra_args)
  log = open(log_path, 'w')
  proc = popen(args, stdin=subprocess.DEVNULL, stdout=log,
                          stderr=log)
  log.close()
  deadline = time.monotonic() + 60
  pattern = re.compile(r'msg="reverie serving" addr=(\S+)')
  while time.monotonic() < deadline:
    with open(log_path, errors='replace') as f:
      m = pattern.search(f.read())
    if m:
      address = m.group(1)
      host, port = address.rsplit(':', 1)
      if wait_for_port(host, int(port), deadline):
        return ServerProcess('reverie', proc, address, log_path)
    if proc.poll() is not None:
      break
    time.sleep(0.05)
  proc.kill()
  proc.wait(10)
  with open(log_path, errors='replace') as f:
    raise RuntimeError(f'reverie serve did not start:\n{f.read()}')


def start_reverb(python, config_path, log_path):
  """Reverb's server through reverb_launcher.py; it prints `port=N`."""
  if not os.path.exists(python):
    raise RuntimeError(f'--reverb-python {python} does not exist; run '
                       'scripts/reverb-env.sh')
  log = open(log_path, 'w')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  proc = popen([python, LAUNCHER, config_path, '--stdin-eof'],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=log, env=env)
  log.close()
  line = []

  def read_line():
    line.append(proc.stdout.readline().decode())

  reader = threading.Thread(target=read_line, daemon=True)
  reader.start()
  reader.join(START_TIMEOUT_S)
  m = re.match(r'port=(\d+)', line[0]) if line else None
  if not m:
    proc.kill()
    proc.wait(10)
    with open(log_path, errors='replace') as f:
      raise RuntimeError(f'reverb_launcher did not start:\n{f.read()}')
  address = f'127.0.0.1:{m.group(1)}'
  if not wait_for_port('127.0.0.1', int(m.group(1)), time.monotonic() + 30):
    proc.kill()
    raise RuntimeError(f'Reverb server at {address} does not accept '
                       'connections')
  return ServerProcess('reverb', proc, address, log_path)


@pytest.fixture(scope='session')
def log_dir():
  d = os.environ.get('REVERIE_TEST_LOG_DIR')
  if d:
    os.makedirs(d, exist_ok=True)
    yield d
    return
  d = tempfile.mkdtemp(prefix='reverie_pytest_')
  yield d
  shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope='session')
def server(request, log_dir):
  """The session's server, stopped at the end."""
  kind = request.config.getoption('--server')
  log_path = os.path.join(log_dir, f'{kind}-server.log')
  if kind == 'reverie':
    ckpt = tempfile.mkdtemp(prefix='reverie_ckpt_')
    srv = start_reverie(CONFIG, log_path, checkpoint_dir=ckpt)
  else:
    ckpt = None
    srv = start_reverb(request.config.getoption('--reverb-python'), CONFIG,
                       log_path)
  yield srv
  srv.stop()
  if ckpt:
    shutil.rmtree(ckpt, ignore_errors=True)


@pytest.fixture(scope='session')
def server_kind(server):
  return server.kind


@pytest.fixture(scope='session')
def address(server):
  return server.address


@pytest.fixture(scope='session')
def client(server):
  import reverie  # pylint: disable=g-import-not-at-top
  c = reverie.Client(server.address)
  c.server_info(timeout=30)
  yield c
  c.close()


@pytest.fixture
def reset(client):
  """reset(*tables): empties the tables a test uses."""

  def do(*tables):
    for t in tables:
      client.reset(t, timeout=10)

  return do


@pytest.fixture
def own_reverie(log_dir):
  """Starts servers of the test's own: own_reverie(listen=..., args=...)
  -> server; args are more flags of `reverie serve`."""
  started = []

  def start(listen='127.0.0.1:0', config=CONFIG, args=()):
    n = len(started)
    srv = start_reverie(config, os.path.join(log_dir, f'own-{os.getpid()}-'
                                             f'{time.monotonic_ns()}-{n}.log'),
                        listen=listen, extra_args=args)
    started.append(srv)
    return srv

  yield start
  for srv in started:
    srv.stop(signal.SIGKILL)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
  """Runs the test function in a daemon thread with a time limit."""
  func = pyfuncitem.obj
  args = {name: pyfuncitem.funcargs[name]
          for name in pyfuncitem._fixtureinfo.argnames}  # pylint: disable=protected-access
  outcome = {}

  def target():
    try:
      func(**args)
    except BaseException as e:  # pylint: disable=broad-except
      outcome['error'] = e

  t = threading.Thread(target=target, daemon=True,
                       name=f'test:{pyfuncitem.name}')
  t.start()
  t.join(TEST_TIMEOUT_S)
  if t.is_alive():
    pytest.fail(f'HANG: {pyfuncitem.name} still running after '
                f'{TEST_TIMEOUT_S}s', pytrace=False)
  if 'error' in outcome:
    raise outcome['error']
  return True


def pytest_sessionfinish(session, exitstatus):
  _exit_status[0] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(_exit_status[0])  # pylint: disable=protected-access
