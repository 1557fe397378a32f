"""Random uint64 keys for items, chunks and episodes.

Reverb's clients pick every key at random. reverie draws them from a
private generator seeded by the operating system (and reseeded in a forked
child), so that actors which seed Python's global `random` identically do
not produce the same keys.
"""

import os
import random

_rng = random.Random(os.urandom(32))


def _reseed():
  _rng.seed(os.urandom(32))


if hasattr(os, 'register_at_fork'):
  os.register_at_fork(after_in_child=_reseed)


def new_key():
  """A uniformly random integer in [0, 2**64)."""
  return _rng.getrandbits(64)
