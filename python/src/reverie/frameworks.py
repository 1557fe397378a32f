"""Batches as PyTorch tensors or JAX arrays.

Neither framework is a dependency of reverie, and this module imports
neither until one of its functions is called. Both functions take any nest
of numpy arrays -- a ReplaySample from a dataset, its ``data`` or a single
array -- and return the same nest (namedtuples stay namedtuples) with the
arrays converted. Arrays the framework cannot hold (numpy object arrays of
strings, and for PyTorch unsigned types it lacks) are left as numpy arrays.
"""

import numpy as np

from reverie import _tree


def _convert(nest, fn):
  def leaf(x):
    if isinstance(x, np.ndarray) and x.dtype.kind in 'OSU':
      return x
    return fn(x)
  return _tree.map_structure(leaf, nest)


def to_torch(nest, device=None):
  """Converts the numpy arrays of ``nest`` to ``torch.Tensor``s.

  Arrays are shared with numpy where PyTorch allows it
  (``torch.as_tensor``) and moved to ``device`` if given. Python scalars
  become 0-d tensors.
  """
  import torch  # pylint: disable=g-import-not-at-top

  def one(x):
    try:
      return torch.as_tensor(x, device=device)
    except (TypeError, RuntimeError):
      # e.g. uint32/uint64 on PyTorch versions without those dtypes.
      return x
  return _convert(nest, one)


def to_jax(nest, device=None):
  """Converts the numpy arrays of ``nest`` to JAX arrays on ``device``
  (JAX's default device if None), with one ``jax.device_put``."""
  import jax  # pylint: disable=g-import-not-at-top

  flat = _tree.flatten(nest)
  keep = [isinstance(x, np.ndarray) and x.dtype.kind in 'OSU' for x in flat]
  moved = jax.device_put([x for x, k in zip(flat, keep) if not k], device)
  it = iter(moved)
  return _tree.unflatten_as(
      nest, [x if k else next(it) for x, k in zip(flat, keep)])
