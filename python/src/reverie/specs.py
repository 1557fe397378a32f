"""Table signatures: tensorflow.StructuredValue to nests of TensorSpec.

Reverb stores a table's signature as the StructuredValue TensorFlow's
``nested_structure_coder`` writes. reverie decodes it without TensorFlow
into nests of :class:`TensorSpec` (dicts, lists, tuples and namedtuples, as
the signature was written) and flattens it as Reverb's C++ client does:
tensor specs are leaves, dicts by sorted key, sequences in order.
"""

import collections
import dataclasses
from typing import Optional, Tuple

import numpy as np

from reverie import encoding
from reverie import errors


@dataclasses.dataclass(frozen=True)
class TensorSpec:
  """The dtype and shape of a column (tf.TensorSpec without TensorFlow).

  ``shape`` is a tuple whose unknown dimensions are None, or None when even
  the rank is unknown. ``dtype`` is a numpy dtype (object for strings).
  """
  shape: Optional[Tuple[Optional[int], ...]]
  dtype: np.dtype
  name: Optional[str] = None

  def is_compatible_with(self, dtype, shape):
    """Whether an array of this dtype and shape fits the spec."""
    dtype = encoding.native_dtype(dtype)  # byte order is the encoder's
    if dtype != encoding.native_dtype(self.dtype):
      if not (self.dtype.kind == 'O' and dtype.kind in 'SUO'):
        return False
    return shape_compatible(self.shape, shape)


@dataclasses.dataclass(frozen=True)
class BoundedTensorSpec(TensorSpec):
  """A TensorSpec with bounds (tf BoundedTensorSpec)."""
  minimum: Optional[np.ndarray] = None
  maximum: Optional[np.ndarray] = None


def shape_compatible(spec_shape, shape):
  if spec_shape is None:
    return True
  if len(spec_shape) != len(shape):
    return False
  return all(s is None or s == d for s, d in zip(spec_shape, shape))


def _shape(sp):
  if sp.unknown_rank:
    return None
  return tuple(None if d.size < 0 else int(d.size) for d in sp.dim)


def _dtype(dt):
  try:
    return encoding.numpy_dtype(dt)
  except errors.ReverieError:
    return np.dtype(np.void)  # a dtype reverie cannot decode


def _bound(spec, field):
  """A bound of a BoundedTensorSpec, as TensorFlow encodes it (raw
  tensor_content). A bound that does not decode is left out: it must not
  make the whole signature, and with it ServerInfo, fail."""
  if not spec.HasField(field):
    return None
  try:
    return encoding.decode_plain_tensor(getattr(spec, field))
  except (errors.ReverieError, ValueError):
    return None


def decode(value):
  """The nest a StructuredValue describes."""
  kind = value.WhichOneof('kind')
  if kind == 'tensor_spec_value':
    s = value.tensor_spec_value
    return TensorSpec(_shape(s.shape), _dtype(s.dtype), s.name or None)
  if kind == 'bounded_tensor_spec_value':
    s = value.bounded_tensor_spec_value
    return BoundedTensorSpec(_shape(s.shape), _dtype(s.dtype), s.name or None,
                             _bound(s, 'minimum'), _bound(s, 'maximum'))
  if kind == 'dict_value':
    return {k: decode(v) for k, v in sorted(value.dict_value.fields.items())}
  if kind == 'list_value':
    return [decode(v) for v in value.list_value.values]
  if kind == 'tuple_value':
    return tuple(decode(v) for v in value.tuple_value.values)
  if kind == 'named_tuple_value':
    nt = value.named_tuple_value
    names = [p.key for p in nt.values]
    # Names that are not identifiers are renamed (positionally, _0, _1,
    # ...) rather than turned into a dict, which would flatten by sorted
    # key and put the columns under the wrong fields.
    type_name = nt.name if nt.name.isidentifier() else 'NamedTuple'
    cls = collections.namedtuple(type_name, names, rename=True)
    return cls(*[decode(p.value) for p in nt.values])
  if kind == 'none_value':
    return None
  if kind in ('float64_value', 'int64_value', 'string_value', 'bool_value'):
    return getattr(value, kind)
  if kind == 'tensor_shape_value':
    return _shape(value.tensor_shape_value)
  if kind == 'tensor_dtype_value':
    return _dtype(value.tensor_dtype_value)
  raise errors.InvalidArgumentError(
      f'unsupported table signature element {kind!r}')


def flatten(signature):
  """The TensorSpecs of a signature nest, in column order."""
  out = []
  _flatten_into(signature, out)
  return out


def _flatten_into(s, out):
  if isinstance(s, TensorSpec):
    out.append(s)
  elif isinstance(s, dict):
    for k in sorted(s):
      _flatten_into(s[k], out)
  elif isinstance(s, (list, tuple)):
    for v in s:
      _flatten_into(v, out)
  else:
    raise errors.InvalidArgumentError(
        f'table signature holds {s!r}, which is not a TensorSpec')
