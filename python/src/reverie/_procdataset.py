"""A dataset iterator whose sampling and batching run in a child process.

A DatasetIterator decodes samples on a background thread, which shares the
GIL with the learner: while the learner runs Python, no sample is decoded,
and every handoff of the GIL costs both. ``Dataset(..., in_subprocess=True)``
moves the sampler and the batcher to a child interpreter (``python -m
reverie._procdataset``) that sends finished batches over a socket pair.
The learner's process only copies a batch's bytes out of the socket, with
the GIL released while it waits.

The protocol, over multiprocessing.connection framing:

* parent to child: one pickled dict (the client and the sampler's
  arguments), then one byte per batch consumed (a credit: the child keeps
  at most ``prefetch`` batches sent but not yet consumed), or ``b's'`` to
  stop. Closing the socket also stops the child.
* child to parent: a pickled header ``(kind, pickle, buffer_lengths)`` and
  then each out-of-band buffer of the pickle (the batch's arrays) as its
  own message, received straight into writable memory. ``kind`` is
  ``'batch'`` (a ReplaySample whose data is the flat list of columns) or
  ``'end'`` (the sampler's error, or None).

The child is started with the parent's interpreter and ``sys.path``, never
forked: a forked gRPC channel is unusable, and the spawn start method of
multiprocessing would import the parent's main script again.
"""

import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
from multiprocessing import connection

from reverie import dataset as dataset_lib
from reverie import errors
from reverie import sampler as sampler_lib

log = logging.getLogger('reverie')

_CREDIT = b'c'
_STOP = b's'
# How long a closing iterator waits for the child to exit before killing it.
_EXIT_TIMEOUT_S = 5.0


def _send(conn, kind, payload):
  bufs = []
  body = pickle.dumps(payload, protocol=5, buffer_callback=bufs.append)
  raws = [b.raw() for b in bufs]
  conn.send_bytes(pickle.dumps((kind, body, [r.nbytes for r in raws])))
  for r in raws:
    conn.send_bytes(r)


def _recv(conn):
  kind, body, lengths = pickle.loads(conn.recv_bytes())
  bufs = []
  for n in lengths:
    buf = bytearray(n)
    if n:
      got = conn.recv_bytes_into(buf)
      if got != n:
        raise errors.ReverieError(
            f'dataset subprocess: a buffer of {got} bytes where {n} were '
            'announced')
    else:
      conn.recv_bytes()
    bufs.append(buf)
  return kind, pickle.loads(body, buffers=bufs)


class ProcessDatasetIterator:
  """A DatasetIterator (same elements, errors and closing) whose sampler
  runs in a child process; see the module docstring."""

  def __init__(self, client, table, batch_size, structure, prefetch,
               drop_remainder, sampler_kwargs):
    self._unflatten = sampler_lib.unflattener(structure)
    self._done = False
    self._lock = threading.Lock()  # one __next__ at a time
    parent, child = socket.socketpair()
    env = dict(os.environ)
    # The child imports reverie from where this process did, and sees the
    # same modules as this one (a client given an import path at run time).
    env['PYTHONPATH'] = os.pathsep.join(p for p in sys.path if p)
    try:
      self._proc = subprocess.Popen(
          [sys.executable, '-m', 'reverie._procdataset',
           str(child.fileno())],
          pass_fds=[child.fileno()], env=env, stdin=subprocess.DEVNULL,
          close_fds=True)
    except BaseException:
      parent.close()
      raise
    finally:
      child.close()
    self._conn = connection.Connection(parent.detach())
    try:
      self._conn.send(dict(
          client=client, table=table, batch_size=batch_size,
          prefetch=prefetch, drop_remainder=drop_remainder,
          sampler_kwargs=sampler_kwargs))
    except BaseException:
      self.close()
      raise

  def __iter__(self):
    return self

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def __next__(self):
    with self._lock:
      if self._done:
        raise StopIteration
      try:
        kind, payload = _recv(self._conn)
      except (EOFError, OSError) as e:
        if self._done:  # closed by another thread
          raise StopIteration from None
        code = self._proc.poll()
        self.close()
        raise errors.ReverieError(
            'dataset subprocess ended without finishing the iteration '
            f'(exit status {code}): {e or type(e).__name__}') from e
      if kind == 'batch':
        try:
          self._conn.send_bytes(_CREDIT)
        except OSError:
          pass  # the child finished and left; its end is still to be read
        return sampler_lib.ReplaySample(payload.info,
                                        self._unflatten(payload.data))
      self.close()
      dataset_lib.raise_end(payload)

  def close(self, timeout=_EXIT_TIMEOUT_S):
    """Stops the child and waits up to ``timeout`` seconds for it to exit,
    then kills it."""
    self._done = True
    conn = self.__dict__.get('_conn')
    if conn is not None and not conn.closed:
      try:
        conn.send_bytes(_STOP)
      except OSError:
        pass
      conn.close()
    proc = self.__dict__.get('_proc')
    if proc is not None and proc.returncode is None:
      try:
        proc.wait(timeout)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

  def __del__(self):
    try:
      self.close(timeout=0.5)
    except Exception:  # pylint: disable=broad-except
      pass


class _Sink:
  """The child's batch channel: sends a batch once the parent has room."""

  def __init__(self, conn, credits):
    self._conn = conn
    self._credits = threading.Semaphore(credits)
    self._send_lock = threading.Lock()
    self.stopping = threading.Event()
    self.finished = threading.Event()

  def credit(self):
    self._credits.release()

  def put(self, sample):
    while not self._credits.acquire(timeout=0.1):
      if self.stopping.is_set():
        return False
    if self.stopping.is_set():
      return False
    try:
      with self._send_lock:
        _send(self._conn, 'batch', sample)
    except OSError:
      self.stopping.set()
      return False
    return True

  def close(self):
    self.finished.set()

  def clear(self):
    pass


def _serve(conn):
  """The child's life: sample, batch, send, until the iteration ends or
  the parent stops it."""
  cfg = conn.recv()
  sink = _Sink(conn, cfg['prefetch'])
  batcher = dataset_lib._Batcher(  # pylint: disable=protected-access
      cfg['batch_size'], sink, cfg['drop_remainder'], lambda flat: flat)
  try:
    sampler = sampler_lib.Sampler(cfg['client'], cfg['table'], sink=batcher,
                                  **cfg['sampler_kwargs'])
  except errors.ReverieError as e:
    _send(conn, 'end', e)
    return
  try:
    while not sink.finished.is_set():
      if not conn.poll(0.05):
        continue
      msg = conn.recv_bytes()
      if msg == _CREDIT:
        sink.credit()
      else:
        break  # stop
    else:
      with sink._send_lock:  # pylint: disable=protected-access
        _send(conn, 'end', sampler.error)
  except (EOFError, OSError):
    pass  # the parent went away
  finally:
    sink.stopping.set()
    sampler.close()


def main(argv):
  conn = connection.Connection(int(argv[1]))
  try:
    _serve(conn)
  finally:
    conn.close()


if __name__ == '__main__':
  main(sys.argv)
