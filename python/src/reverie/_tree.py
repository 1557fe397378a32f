"""Nested structures ("nests"), with dm-tree's flattening order.

A nest is a leaf or a mapping, list, tuple or namedtuple of nests.
Mappings are flattened in sorted key order, sequences in order, and None is
a leaf, exactly as ``tree.flatten`` does, so items written by dm-reverb and
by reverie flatten the same way. Only what the client needs is here.
"""

import collections.abc

_Mapping = collections.abc.Mapping


def is_namedtuple(x):
  return isinstance(x, tuple) and hasattr(type(x), '_fields')


# Whether values of a type are nests, by type: isinstance against the
# Mapping ABC is one of the slower steps of flattening a step of arrays.
# Only types seen are cached, a handful in any program.
_nested_types = {list: True, tuple: True, dict: True}


def _is_nested(x):
  t = type(x)
  nested = _nested_types.get(t)
  if nested is None:
    nested = _nested_types[t] = isinstance(x, (list, tuple, _Mapping))
  return nested


def _sorted_keys(m):
  try:
    return sorted(m)
  except TypeError as e:
    raise TypeError(f'mapping keys must be sortable: {list(m)}') from e


def flatten(s):
  """The leaves of ``s`` in dm-tree order."""
  if not _is_nested(s):
    return [s]
  out = []
  _flatten_into(s, out)
  return out


def _flatten_into(s, out):
  if type(s) is dict or isinstance(s, _Mapping):
    for k in _sorted_keys(s):
      v = s[k]
      if _is_nested(v):
        _flatten_into(v, out)
      else:
        out.append(v)
  elif isinstance(s, (list, tuple)):
    for v in s:
      if _is_nested(v):
        _flatten_into(v, out)
      else:
        out.append(v)
  else:
    out.append(s)


def flatten_with_path(s):
  """``[(path, leaf), ...]`` where path is a tuple of keys and indices."""
  out = []
  _flatten_with_path_into(s, (), out)
  return out


def _flatten_with_path_into(s, path, out):
  if not _is_nested(s):
    out.append((path, s))
  elif type(s) is dict or isinstance(s, _Mapping):
    for k in _sorted_keys(s):
      _flatten_with_path_into(s[k], path + (k,), out)
  else:
    for i, v in enumerate(s):
      _flatten_with_path_into(v, path + (i,), out)


def _sequence_like(instance, values):
  """A container of instance's type holding values (in flattening order)."""
  if isinstance(instance, _Mapping):
    by_key = dict(zip(_sorted_keys(instance), values))
    pairs = [(k, by_key[k]) for k in instance]
    try:
      return type(instance)(pairs)
    except TypeError:
      return dict(pairs)
  if is_namedtuple(instance):
    return type(instance)(*values)
  if isinstance(instance, tuple):
    return tuple(values)
  return list(values)


def unflatten_as(structure, flat):
  """Packs the leaves ``flat`` into the shape of ``structure``."""
  flat = list(flat)
  n = len(flatten(structure))
  if n != len(flat):
    raise ValueError(
        f'structure has {n} leaves but {len(flat)} values were given')
  it = iter(flat)
  return _pack(structure, it)


def _pack(s, it):
  if isinstance(s, _Mapping):
    return _sequence_like(s, [_pack(s[k], it) for k in _sorted_keys(s)])
  if isinstance(s, (list, tuple)):
    return _sequence_like(s, [_pack(v, it) for v in s])
  return next(it)


def map_structure(fn, *structures):
  """``fn`` applied to the corresponding leaves of equally shaped nests."""
  if not structures:
    raise ValueError('map_structure needs at least one structure')
  flats = [flatten(s) for s in structures]
  n = len(flats[0])
  for f in flats[1:]:
    if len(f) != n:
      raise ValueError('structures have different numbers of leaves')
  return unflatten_as(structures[0], [fn(*xs) for xs in zip(*flats)])


def union(a, b):
  """The union of two structures whose leaves are None: mappings merge key
  by key, equally long sequences element by element, a None side takes the
  other; on a conflict the first wins."""
  if a is None:
    return b
  if b is None:
    return a
  if isinstance(a, _Mapping) and isinstance(b, _Mapping):
    out = dict(a)
    for k, v in b.items():
      out[k] = union(a.get(k), v)
    try:
      return type(a)(out)
    except TypeError:
      return out
  if (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and
      len(a) == len(b)):
    return _sequence_like(a, [union(x, y) for x, y in zip(a, b)])
  return a
