"""Server subprocesses for reverie's pytest suites.

Shared by conformance/conftest.py (the dm-reverb client suite) and
python/tests/conftest.py (reverie's Python client): starting a child that
dies with pytest, waiting for its port, and stopping it.
"""

import functools
import os
import shutil
import signal
import socket
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ServerProcess:
  """A server subprocess: kind ('reverie' or 'reverb'), address, log."""

  def __init__(self, kind, proc, address, log_path):
    self.kind = kind
    self.proc = proc
    self.address = address
    self.log_path = log_path

  @property
  def port(self):
    return int(self.address.rsplit(':', 1)[1])

  def stop(self, sig=signal.SIGTERM):
    """Sends sig (SIGTERM), then SIGKILL after 10 s."""
    if self.proc.poll() is None:
      self.proc.send_signal(sig)
      try:
        self.proc.wait(10)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait(10)
    for f in (self.proc.stdin, self.proc.stdout):
      if f is not None:
        f.close()

  def log_tail(self, n=40):
    try:
      with open(self.log_path, errors='replace') as f:
        return ''.join(f.readlines()[-n:])
    except OSError:
      return ''


def popen(args, **kwargs):
  """subprocess.Popen of args under `setpriv --pdeathsig TERM`, when setpriv
  can do it, so that the child gets SIGTERM when pytest dies (Linux's
  PDEATHSIG). setpriv execs the command, so the pid is the child's own.

  This replaces a prctl call in a preexec function: with one, Popen forks
  the process, gRPC threads and all, and runs gRPC's fork handlers in the
  child; now and then that crashed the child before it could exec
  ("epoll_wait error: Bad file descriptor" in its log and no server).
  Without one, Popen uses vfork and no handler runs.
  """
  if _setpriv_pdeathsig():
    args = ['setpriv', '--pdeathsig', 'TERM', '--'] + list(args)
  return subprocess.Popen(args, **kwargs)  # pylint: disable=consider-using-with


@functools.lru_cache(maxsize=None)
def _setpriv_pdeathsig():
  setpriv = shutil.which('setpriv')
  if not setpriv:
    return False
  try:
    out = subprocess.run([setpriv, '--help'], capture_output=True, text=True,
                         timeout=10, check=False)
  except (OSError, subprocess.SubprocessError):
    return False
  return '--pdeathsig' in out.stdout


def wait_for_port(host, port, deadline):
  """Whether host:port accepts a connection before time.monotonic() passes
  deadline."""
  while time.monotonic() < deadline:
    try:
      with socket.create_connection((host, port), timeout=1):
        return True
    except OSError:
      time.sleep(0.05)
  return False


@functools.lru_cache(maxsize=None)
def reverie_binary():
  """$REVERIE_BIN, else .bin/reverie built once from the repository."""
  binary = os.environ.get('REVERIE_BIN')
  if binary:
    return binary
  binary = os.path.join(ROOT, '.bin', 'reverie')
  subprocess.run(['go', 'build', '-o', binary, './cmd/reverie'], cwd=ROOT,
                 check=True, timeout=600)
  return binary
