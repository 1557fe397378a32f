"""TLS, mutual TLS and bearer tokens against `reverie serve` (reverie only:
Reverb's server speaks only plaintext)."""

import os
import pickle

import numpy as np
import pytest

import reverie

from conftest import ROOT

CERTS = os.path.join(ROOT, 'testdata', 'tls')


def _read(name):
  with open(os.path.join(CERTS, name), 'rb') as f:
    return f.read()


@pytest.fixture
def secure_server(own_reverie, tmp_path):
  tokens = tmp_path / 'tokens'
  tokens.write_text('# learners\nalpha\nbeta\n')
  return own_reverie(args=[
      '--tls-cert', os.path.join(CERTS, 'server.pem'),
      '--tls-key', os.path.join(CERTS, 'server.key'),
      '--auth-token-file', str(tokens)])


@pytest.mark.reverie_only
def test_tls_and_token(secure_server):
  ca = _read('ca.pem')
  with reverie.Client(secure_server.address, tls=ca, token='beta') as c:
    c.insert(np.float32(3), {'queue': 1.0}, timeout=10)
    (steps,) = list(c.sample('queue', 1, timeout=10))
    assert float(steps[0].data[0]) == 3.0
    # A pickled client keeps its TLS and token (datasets' workers).
    c2 = pickle.loads(pickle.dumps(c))
    assert 'queue' in c2.server_info(timeout=10)
    c2.close()
    # So does a dataset's child process.
    c.insert(np.float32(4), {'queue': 1.0}, timeout=10)
    (batch,) = list(c.dataset('queue', 1, max_samples=1, in_subprocess=True,
                              rate_limiter_timeout_ms=10_000))
    assert batch.data[0].ravel().tolist() == [4.0]

  for token, words in ((None, 'missing'), ('gamma', 'not one this server')):
    with reverie.Client(secure_server.address, tls=ca, token=token) as c:
      with pytest.raises(reverie.UnauthenticatedError, match=words):
        c.server_info(timeout=10)
      w = c.trajectory_writer(num_keep_alive_refs=1)
      w.append({'x': np.float32(1)})
      with pytest.raises(reverie.UnauthenticatedError):
        # The table's signature is fetched first, or the insert fails.
        w.create_item('queue', 1.0, {'x': w.history['x'][-1:]})
        w.flush(timeout_ms=10_000)
      w.close()

  # A client that does not trust the server's certificate never connects.
  with reverie.Client(secure_server.address, tls=True, token='beta') as c:
    with pytest.raises(reverie.ServerUnavailableError):
      c.server_info(timeout=2)


@pytest.mark.reverie_only
def test_local_socket_skips_tls_and_token(own_reverie, tmp_path):
  """`--local-listen` serves the same tables on a unix socket to clients
  with neither TLS nor a token, as dm-reverb's client is (it runs on the
  same gRPC core as grpcio); TCP still asks for both."""
  tokens = tmp_path / 'tokens'
  tokens.write_text('alpha\n')
  sock = tmp_path / 'local.sock'
  srv = own_reverie(args=[
      '--tls-cert', os.path.join(CERTS, 'server.pem'),
      '--tls-key', os.path.join(CERTS, 'server.key'),
      '--auth-token-file', str(tokens),
      '--local-listen', f'unix://{sock}'])
  with reverie.Client(f'unix://{sock}') as c:
    c.insert(np.float32(5), {'queue': 1.0}, timeout=10)
    w = c.trajectory_writer(num_keep_alive_refs=1)
    w.append({'x': np.float32(6)})
    w.create_item('queue', 1.0, {'x': w.history['x'][-1:]})
    w.flush(timeout_ms=10_000)
    w.close()
  with reverie.Client(srv.address, tls=_read('ca.pem'), token='alpha') as c:
    got = [float(steps[0].data[0])
           for steps in c.sample('queue', 2, timeout=10)]
    assert got == [5.0, 6.0]
  with reverie.Client(srv.address, tls=_read('ca.pem')) as c:
    with pytest.raises(reverie.UnauthenticatedError, match='missing'):
      c.server_info(timeout=10)


@pytest.mark.reverie_only
def test_mutual_tls(own_reverie):
  srv = own_reverie(args=[
      '--tls-cert', os.path.join(CERTS, 'server.pem'),
      '--tls-key', os.path.join(CERTS, 'server.key'),
      '--tls-client-ca', os.path.join(CERTS, 'ca.pem')])
  ca = _read('ca.pem')
  cert = (_read('client.pem'), _read('client.key'))
  with reverie.Client(srv.address, tls=ca, tls_client_cert=cert) as c:
    assert 'queue' in c.server_info(timeout=10)
  with reverie.Client(srv.address, tls=ca) as c:
    with pytest.raises(reverie.ServerUnavailableError):
      c.server_info(timeout=2)


def test_token_needs_tls():
  with pytest.raises(ValueError, match='never sent in plaintext'):
    reverie.Client('localhost:1', token='alpha')
  with pytest.raises(ValueError, match='needs tls'):
    reverie.Client('localhost:1', tls_client_cert=(b'', b''))
  with pytest.raises(TypeError, match='tls'):
    reverie.Client('localhost:1', tls='ca.pem')
  with pytest.raises(ValueError, match='token'):
    reverie.Client('localhost:1', tls=True, token='two words')
