"""Small thread-safe queues the client's background threads use."""

import collections
import threading
import time


class Closed(Exception):
  """The channel was closed and holds nothing more."""


class Empty(Exception):
  """get() timed out."""


class Channel:
  """A bounded FIFO between threads that can be closed.

  After close(), put() returns False and get() returns what is left, then
  raises Closed. A maxsize of 0 means unbounded.
  """

  def __init__(self, maxsize=0):
    self._maxsize = maxsize
    self._items = collections.deque()
    self._cond = threading.Condition(threading.Lock())
    self._closed = False

  def put(self, item):
    """Adds item, waiting for room; False if the channel is closed."""
    with self._cond:
      while (self._maxsize and len(self._items) >= self._maxsize and
             not self._closed):
        self._cond.wait()
      if self._closed:
        return False
      self._items.append(item)
      self._cond.notify_all()
      return True

  def get(self, timeout=None):
    """The oldest item; raises Empty after timeout seconds, or Closed."""
    with self._cond:
      if not self._items and not self._closed:
        if timeout is None:
          while not self._items and not self._closed:
            self._cond.wait()
        else:
          deadline = time.monotonic() + timeout
          while not self._items and not self._closed:
            left = deadline - time.monotonic()
            if left <= 0:
              raise Empty()
            self._cond.wait(left)
      if self._items:
        item = self._items.popleft()
        self._cond.notify_all()
        return item
      raise Closed()

  def close(self):
    with self._cond:
      self._closed = True
      self._cond.notify_all()

  def clear(self):
    with self._cond:
      self._items.clear()
      self._cond.notify_all()

  @property
  def closed(self):
    with self._cond:
      return self._closed


class Requests:
  """The request iterator of a gRPC stream: next() blocks until a request
  is put or the iterator is closed (which half-closes the stream)."""

  def __init__(self):
    self._items = collections.deque()
    self._cond = threading.Condition(threading.Lock())
    self._closed = False

  def put(self, request):
    with self._cond:
      self._items.append(request)
      self._cond.notify()

  def close(self):
    with self._cond:
      self._closed = True
      self._cond.notify_all()

  def __iter__(self):
    return self

  def __next__(self):
    with self._cond:
      while not self._items and not self._closed:
        self._cond.wait()
      if self._items:
        return self._items.popleft()
      raise StopIteration
