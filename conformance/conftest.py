"""pytest setup for the dm-reverb conformance suite.

Starts one server for the session, with the tables of
conformance/configs/dm_reverb_client.yaml, and hands the tests a
`reverb.Client` connected to it over gRPC:

    py=$(scripts/reverb-env.sh)
    "$py" -m pytest conformance                    # reverie (the default)
    "$py" -m pytest conformance --server=reverb    # Reverb's own server

--server=reverie runs `reverie serve` on 127.0.0.1: the binary named by
$REVERIE_BIN, else one built with `go build -o .bin/reverie ./cmd/reverie`
from the repository root. --server=reverb runs Reverb's server in a
subprocess through conformance/reverb_launcher.py (a separate process, so the
client talks gRPC to it and never takes Reverb's in-process shortcut).
Reverb's server binds every interface; scripts/conformance.sh runs that leg in
a private network namespace.

Every test runs in a thread with a time limit (TEST_TIMEOUT_S, 90 s, or
$CONFORMANCE_TEST_TIMEOUT_S): a hang fails the test instead of the suite. Because a hung call stays blocked in C++,
the process leaves with os._exit once pytest has reported.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from testproc import ServerProcess, popen, reverie_binary, wait_for_port

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, 'conformance')
CONFIG = os.path.join(HERE, 'configs', 'dm_reverb_client.yaml')
LAUNCHER = os.path.join(HERE, 'reverb_launcher.py')

TEST_TIMEOUT_S = float(os.environ.get('CONFORMANCE_TEST_TIMEOUT_S', 90))
START_TIMEOUT_S = 180  # Reverb's launcher imports TensorFlow first

_exit_status = [0]


def pytest_addoption(parser):
  group = parser.getgroup('conformance')
  group.addoption(
      '--server', choices=('reverie', 'reverb'), default='reverie',
      help='which server the dm-reverb client talks to (default: reverie)')
  group.addoption(
      '--server-config', default=CONFIG,
      help='tables of the server (default: configs/dm_reverb_client.yaml)')


def pytest_report_header(config):
  return f'conformance server: {config.getoption("--server")}'


def start_reverie(config_path, log_path):
  """`reverie serve` on 127.0.0.1, a free port; its address from its log."""
  log = open(log_path, 'w')
  proc = popen(
      [reverie_binary(), 'serve', '--config', config_path,
       '--listen', '127.0.0.1:0'],
      stdin=subprocess.DEVNULL, stdout=log, stderr=log)
  log.close()
  deadline = time.monotonic() + START_TIMEOUT_S
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


def start_reverb(config_path, log_path):
  """Reverb's server through reverb_launcher.py; it prints `port=N`."""
  log = open(log_path, 'w')
  proc = popen(
      [sys.executable, LAUNCHER, config_path, '--stdin-eof'],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
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
  if not wait_for_port('127.0.0.1', int(m.group(1)),
                        time.monotonic() + 30):
    proc.kill()
    raise RuntimeError(f'Reverb server at {address} does not accept '
                       'connections')
  return ServerProcess('reverb', proc, address, log_path)


@pytest.fixture(scope='session')
def server(request):
  """The running server (kind, address), stopped at the end of the session."""
  kind = request.config.getoption('--server')
  config_path = request.config.getoption('--server-config')
  # The server's log: kept in $CONFORMANCE_LOG_DIR (scripts/conformance.sh
  # sets it), else in a temporary directory removed afterwards.
  log_dir = os.environ.get('CONFORMANCE_LOG_DIR')
  temporary = not log_dir
  if temporary:
    log_dir = tempfile.mkdtemp(prefix='conformance_')
  log_path = os.path.join(log_dir, f'{kind}-server.log')
  try:
    if kind == 'reverie':
      srv = start_reverie(config_path, log_path)
    else:
      srv = start_reverb(config_path, log_path)
    yield srv
    srv.stop()
  finally:
    if temporary:
      shutil.rmtree(log_dir, ignore_errors=True)


@pytest.fixture(scope='session')
def server_config(request):
  """The parsed config file of the server's tables."""
  import yaml  # pylint: disable=g-import-not-at-top
  with open(request.config.getoption('--server-config')) as f:
    return yaml.safe_load(f)


@pytest.fixture(scope='session')
def server_kind(server):
  return server.kind


@pytest.fixture(scope='session')
def address(server):
  return server.address


@pytest.fixture(scope='session')
def client(server):
  import reverb  # pylint: disable=g-import-not-at-top
  c = reverb.Client(server.address)
  c.server_info(timeout=30)  # connected and serving
  return c


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
  # Blocked C++ threads (a hung test, gRPC's own) can keep the interpreter
  # from exiting: leave once everything is reported.
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(_exit_status[0])  # pylint: disable=protected-access
