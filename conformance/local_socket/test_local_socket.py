"""DeepMind's unmodified dm-reverb client on reverie's local socket.

A reverie server with TLS and bearer tokens, which dm-reverb's client
cannot speak, also serves its tables on a unix socket without either
(`reverie serve --local-listen`, docs/config.md; departure 30 of
docs/compatibility.md). Reverb's server has no such socket, so this is leg
(e) of scripts/conformance.sh, run against reverie alone; legs (a) and (b)
leave this directory out.
"""

import os
import signal
import subprocess
import time

import numpy as np
import pytest
import reverb
import tensorflow as tf

from testproc import popen, reverie_binary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CERTS = os.path.join(ROOT, 'testdata', 'tls')
CONFIG = os.path.join(ROOT, 'conformance', 'configs', 'dm_reverb_client.yaml')


@pytest.fixture
def protected(tmp_path):
  """A reverie server with TLS and a token on TCP and a local socket:
  yields (tcp address, socket target)."""
  tokens = tmp_path / 'tokens'
  tokens.write_text('alpha\n')
  sock = tmp_path / 'local.sock'
  log_path = tmp_path / 'reverie.log'
  with open(log_path, 'w') as log:
    proc = popen(
        [reverie_binary(), 'serve', '--config', CONFIG,
         '--listen', '127.0.0.1:0',
         '--tls-cert', os.path.join(CERTS, 'server.pem'),
         '--tls-key', os.path.join(CERTS, 'server.key'),
         '--auth-token-file', str(tokens),
         '--local-listen', f'unix://{sock}'],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log)
  try:
    address = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
      text = log_path.read_text(errors='replace')
      for line in text.splitlines():
        if 'msg="reverie serving"' in line:
          address = line.split(' addr=')[1].split()[0]
      if address and sock.exists():
        break
      time.sleep(0.05)
    if not (address and sock.exists()):
      raise RuntimeError('reverie serve did not start:\n'
                         + log_path.read_text(errors='replace'))
    yield address, f'unix://{sock}'
  finally:
    proc.send_signal(signal.SIGTERM)
    try:
      proc.wait(10)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait(10)


def test_local_socket_client_writer_dataset(protected):
  """insert, a trajectory writer, sample, a TrajectoryDataset and
  server_info, all through the socket."""
  _, local = protected
  client = reverb.Client(local)
  client.reset('queue')
  client.reset('uniform')
  client.insert([np.float32(1.5)], {'uniform': 1.0})
  with client.trajectory_writer(num_keep_alive_refs=2) as w:
    for step in range(2):
      w.append({'obs': np.full((3,), step, np.float32)})
    w.create_item('queue', 1.0, {'obs': w.history['obs'][-2:]})
    w.flush(timeout_ms=15_000)
  assert client.server_info(timeout=30)['uniform'].current_size == 1
  (got,) = list(client.sample('uniform', num_samples=1))
  assert float(got[0].data[0]) == 1.5

  ds = reverb.TrajectoryDataset(
      server_address=local, table='queue',
      dtypes={'obs': tf.float32}, shapes={'obs': tf.TensorShape([2, 3])},
      max_in_flight_samples_per_worker=1, rate_limiter_timeout_ms=5_000)
  sample = next(iter(ds.take(1)))
  np.testing.assert_array_equal(sample.data['obs'].numpy(),
                                np.array([[0, 0, 0], [1, 1, 1]], np.float32))


def test_local_socket_tcp_still_protected(protected):
  """The same client over TCP, in plaintext without a token, never gets
  an answer: the listener wants a TLS handshake."""
  address, _ = protected
  client = reverb.Client(address)
  with pytest.raises(reverb.errors.DeadlineExceededError):
    client.server_info(timeout=3)
