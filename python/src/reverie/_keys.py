"""Random uint64 keys for items, chunks and episodes.

Reverb's clients pick every key at random. reverie draws them from a
private generator seeded by the operating system (and reseeded in a forked
child), so that actors which seed Python's global `random` identically do
not produce the same keys.

A writer needs each key's varint encoding as well, and encoding a 64-bit
key one 7-bit group at a time in Python cost more than any other single
step of an append and create_item. So keys are drawn in batches, and the
batch's encodings computed at once with numpy; new_key_varint hands out
one (key, encoding) pair at a time.
"""

import os
import random

import numpy as np

_rng = random.Random(os.urandom(32))
# Keys drawn at a time. numpy releases the GIL in loops over more than 500
# elements, and a release hands any busy Python thread of the process its
# 5 ms turn: 256 keys (2,560 elements per step of varints) took 8.5 ms
# beside such a thread, against 0.16 ms alone. 48 keys stay under the
# threshold, for about 0.7 µs more per key.
_BATCH = 48
_SHIFTS = np.arange(0, 64, 7, dtype=np.uint64)  # the 10 groups of 7 bits
_GROUP = np.arange(len(_SHIFTS))
_pool = []  # (key, varint) pairs, taken from the end


def _reseed():
  _rng.seed(os.urandom(32))
  _pool.clear()


if hasattr(os, 'register_at_fork'):
  os.register_at_fork(after_in_child=_reseed)


def varints(keys):
  """The varint encodings of a uint64 numpy array, as a list of bytes."""
  groups = ((keys[:, None] >> _SHIFTS) & np.uint64(0x7f)).astype(np.uint8)
  # A varint has as many bytes as the key has groups up to its highest
  # nonzero one (one for key 0); all but its last byte have the top bit set.
  nonzero = groups != 0
  lengths = np.where(nonzero.any(axis=1),
                     len(_SHIFTS) - np.argmax(nonzero[:, ::-1], axis=1), 1)
  groups |= np.where(_GROUP < lengths[:, None] - 1, 0x80, 0).astype(np.uint8)
  width = len(_SHIFTS)
  flat = groups.tobytes()
  return [flat[i * width:i * width + n]
          for i, n in enumerate(lengths.tolist())]


def _refill():
  keys = np.frombuffer(_rng.randbytes(8 * _BATCH), dtype='<u8')
  _pool.extend(zip(keys.tolist(), varints(keys)))


def new_key_varint():
  """A uniformly random integer in [0, 2**64) and its varint encoding."""
  while True:
    try:
      return _pool.pop()
    except IndexError:  # empty, perhaps taken by another thread meanwhile
      _refill()


def new_key():
  """A uniformly random integer in [0, 2**64)."""
  return new_key_varint()[0]
