"""Acme-style adders: turn an actor's (action, timestep) stream into items.

An adder is fed one episode at a time::

    adder.add_first(timestep)                  # the episode's first timestep
    adder.add(action, next_timestep, extras)   # after every environment step
    ...                                        # the episode ends when
                                               # next_timestep.last()

Timesteps are dm_env.TimeStep or anything with ``observation``, ``reward``,
``discount`` and ``step_type`` (and ``first()``/``last()``); this module's
:class:`TimeStep` with :func:`restart`, :func:`transition`,
:func:`termination` and :func:`truncation` needs no dm_env. Observations,
actions and extras may be nests; rewards and discounts are arrays or
scalars.

Items go into every table of ``priority_fns`` (default: one table named
'priority_table' with priority 1.0); a priority function receives the
item's trajectory as numpy arrays. After each item the adder flushes down
to ``max_in_flight_items`` unconfirmed items, so an actor cannot run far
ahead of the server.

Conventions (as Acme's): r_t and d_t are the reward and discount of the
timestep that follows action a_t (``next_timestep.reward``,
``next_timestep.discount``); the final timestep's discount is 0 for a
termination and 1 for a truncation.
"""

import collections
import enum
import logging
from typing import Any, Callable, Mapping, NamedTuple, Optional

import numpy as np

from reverie import _tree

DEFAULT_PRIORITY_TABLE = 'priority_table'
# How long Adder.close waits by default for the server to confirm the
# items written.
CLOSE_TIMEOUT_MS = 10_000

log = logging.getLogger('reverie')


class StepType(enum.IntEnum):
  FIRST = 0
  MID = 1
  LAST = 2


class TimeStep(NamedTuple):
  """A dm_env-compatible timestep."""
  step_type: Any
  reward: Any
  discount: Any
  observation: Any

  def first(self):
    return self.step_type == StepType.FIRST

  def mid(self):
    return self.step_type == StepType.MID

  def last(self):
    return self.step_type == StepType.LAST


def restart(observation):
  return TimeStep(StepType.FIRST, None, None, observation)


def transition(reward, observation, discount=1.0):
  return TimeStep(StepType.MID, reward, discount, observation)


def termination(reward, observation):
  return TimeStep(StepType.LAST, reward, 0.0, observation)


def truncation(reward, observation, discount=1.0):
  return TimeStep(StepType.LAST, reward, discount, observation)


class Transition(NamedTuple):
  """An (n-step) transition, as acme.types.Transition."""
  observation: Any
  action: Any
  reward: Any
  discount: Any
  next_observation: Any
  extras: Any = ()


class Step(NamedTuple):
  """One step of a sequence or episode, as Acme's adders write it."""
  observation: Any
  action: Any
  reward: Any
  discount: Any
  start_of_episode: Any
  extras: Any = ()


def _is(ts, name, step_type):
  fn = getattr(ts, name, None)
  if callable(fn):
    return bool(fn())
  return int(ts.step_type) == int(step_type)


def _zeros_like(nest):
  return _tree.map_structure(lambda x: np.zeros_like(np.asarray(x)), nest)


PriorityFn = Callable[[Any], float]


class Adder:
  """Base of the adders: owns a TrajectoryWriter, created lazily.

  Args:
    client: the reverie.Client.
    max_sequence_length: steps each column's history keeps.
    max_in_flight_items: unconfirmed items allowed after each item.
    priority_fns: table name -> function of the numpy trajectory giving the
      priority, or None for 1.0.
    delta_encoded: delta-encode integer columns.
    validate_items: check items against the tables' signatures.
  """

  def __init__(self, client, max_sequence_length: int,
               max_in_flight_items: int,
               priority_fns: Optional[Mapping[str, Optional[PriorityFn]]] = None,
               delta_encoded: bool = False, validate_items: bool = True):
    if max_in_flight_items < 0:
      raise ValueError(
          f'max_in_flight_items must be >= 0, got {max_in_flight_items}')
    self._client = client
    self._max_sequence_length = max_sequence_length
    self._max_in_flight_items = max_in_flight_items
    # As Acme: no mapping, or an empty one, means the default table.
    self._priority_fns = (dict(priority_fns) if priority_fns else
                          {DEFAULT_PRIORITY_TABLE: None})
    self._delta_encoded = delta_encoded
    self._validate_items = validate_items
    self.__writer = None
    self._add_first_called = False

  @property
  def _writer(self):
    if self.__writer is None:
      self.__writer = self._client.trajectory_writer(
          num_keep_alive_refs=self._max_sequence_length,
          validate_items=self._validate_items,
          delta_encoded=self._delta_encoded,
          max_in_flight_items=max(1, self._max_in_flight_items) + len(
              self._priority_fns))
    return self.__writer

  def add_first(self, timestep):
    """Starts an episode with its first timestep."""
    if not _is(timestep, 'first', StepType.FIRST):
      raise ValueError('adder.add_first must be called with an initial '
                       'timestep (i.e. one for which timestep.first() is True)')
    if self._add_first_called:
      self.reset()
    self._add_first(timestep)
    self._add_first_called = True

  def add(self, action, next_timestep, extras=()):
    """Records ``action`` and the timestep it led to. ``extras`` of None
    are no extras, as ``()`` (the default), as with Acme."""
    if not self._add_first_called:
      raise ValueError('adder.add_first must be called before adder.add.')
    if extras is None:
      extras = ()
    self._add(action, next_timestep, extras)
    if _is(next_timestep, 'last', StepType.LAST):
      self._write_last()
      self.reset()

  def reset(self, timeout_ms: Optional[int] = None):
    """Ends the episode: flushes its items and clears the history."""
    if self.__writer is not None:
      self.__writer.end_episode(clear_buffers=True, timeout_ms=timeout_ms)
    self._add_first_called = False
    self._reset()

  def close(self, timeout_ms: Optional[int] = CLOSE_TIMEOUT_MS):
    """Flushes the items written and closes the writer.

    Waits up to ``timeout_ms`` (default 10 s; None waits without bound)
    for the server to confirm the items, then raises DeadlineExceededError
    (ServerUnavailableError when the server could not be reached): the
    items still unconfirmed are lost. The writer is closed either way.
    Acme's adders have no close(): an adder that is dropped flushes
    (for up to 10 s, logging the items it loses) and closes by itself.
    """
    writer = self.__writer
    if writer is not None:
      self.__writer = None
      try:
        writer.flush(timeout_ms=timeout_ms)
      finally:
        writer.close()

  def __enter__(self):
    return self

  def __exit__(self, exc_type, exc_value, tb):
    if exc_type is None:
      self.close()
      return
    # The block's own exception is the one that propagates.
    try:
      self.close()
    except Exception as e:  # pylint: disable=broad-except
      log.warning('reverie adder: could not flush the items of a block that '
                  'raised %s: %s', exc_type.__name__, e)

  def __del__(self):
    # Code ported from Acme never closes its adders (they have no close),
    # it drops them. As Acme's adders, a dropped one flushes what it wrote
    # (for up to 10 s, logging the items that could not be confirmed) and
    # then closes its writer: the writer's release, which also knows on
    # which threads it may wait.
    writer = self.__dict__.get('_Adder__writer')
    if writer is not None:
      writer._release()  # pylint: disable=protected-access

  def _create_item(self, trajectory):
    """Inserts ``trajectory`` (a nest of TrajectoryColumns) into every
    table, then bounds the unconfirmed items."""
    numpy_trajectory = None
    for table, fn in self._priority_fns.items():
      if fn is None:
        priority = 1.0
      else:
        if numpy_trajectory is None:
          numpy_trajectory = _tree.map_structure(lambda c: c.numpy(),
                                                 trajectory)
        priority = float(fn(numpy_trajectory))
      self._writer.create_item(table, priority, trajectory)
    self._writer.flush(self._max_in_flight_items)

  # Subclasses implement these.
  def _add_first(self, timestep):
    raise NotImplementedError

  def _add(self, action, next_timestep, extras):
    raise NotImplementedError

  def _write_last(self):
    pass

  def _reset(self):
    pass


def _pick(history, index):
  """The column references of a nest of histories at ``index``."""
  return _tree.map_structure(lambda h: h[index], history)


class NStepTransitionAdder(Adder):
  """Writes n-step transitions (s_t, a_t, R, D, s_{t+m}, e_t).

  With rewards r and environment discounts d, and m <= n steps::

    R = r_t + g d_t r_{t+1} + g^2 d_t d_{t+1} r_{t+2} + ...
          + g^{m-1} d_t ... d_{t+m-2} r_{t+m-1}
    D = g^{m-1} d_t d_{t+1} ... d_{t+m-1}

  where g is ``discount``. D carries one factor g less than g^m (for
  m = 1 it is the environment's own d_t), as in Acme: Acme's learners
  multiply the stored discount by g themselves when they bootstrap from
  s_{t+m}.

  Every ``add`` writes one transition ending at the new observation; it
  starts n steps earlier, or at s_0 while fewer than n steps were taken:
  (s_0 -> s_1), (s_0 -> s_2), ..., (s_0 -> s_n), (s_1 -> s_{n+1}), ...
  When the episode ends at s_T the shorter transitions that end there are
  added as well: (s_{T-n+1} -> s_T), ..., (s_{T-1} -> s_T). R keeps the
  reward's dtype and D the discount's. Items are
  :class:`Transition` nests (observation, action, reward, discount,
  next_observation, extras) of squeezed columns.
  """

  def __init__(self, client, n_step: int, discount: float, *,
               priority_fns=None, max_in_flight_items: int = 5,
               validate_items: bool = True):
    if n_step < 1:
      raise ValueError(f'n_step must be >= 1, got {n_step}')
    self.n_step = n_step
    # As Acme: the discount is a float32, whatever it is given as.
    self._discount = np.float32(discount)
    super().__init__(client, max_sequence_length=n_step + 1,
                     max_in_flight_items=max_in_flight_items,
                     priority_fns=priority_fns, validate_items=validate_items)
    self._reset()

  def _reset(self):
    self._t = 0  # index of the latest observation in the episode
    self._rewards = collections.deque(maxlen=self.n_step)
    self._discounts = collections.deque(maxlen=self.n_step)
    self._has_extras = False

  def _add_first(self, timestep):
    self._writer.append({'observation': timestep.observation},
                        partial_step=True)

  def _returns(self, first):
    """(R, D) over steps first .. t-1, computed as Acme computes them.

    The sums are kept in the rewards' and discounts' own dtypes and updated
    in place, with the discount as a float32, so that R and D round as
    Acme's do, bit for bit; R keeps the reward's dtype and D the
    discount's (their shape is that of the two broadcast together).
    """
    k0 = first - (self._t - len(self._rewards))
    rewards = [np.asarray(r) for r in list(self._rewards)[k0:]]
    discounts = [np.asarray(d) for d in list(self._discounts)[k0:]]
    g = self._discount
    total = np.copy(discounts[0])
    ret = np.copy(np.broadcast_to(rewards[0],
                                  np.broadcast(rewards[0], total).shape))
    try:
      for r, d in zip(rewards[1:], discounts[1:]):
        total *= g
        ret += r * total
        total *= d
    except TypeError as e:  # numpy's casting error: integer rewards or discounts
      raise TypeError(
          f'NStepTransitionAdder: the n-step return and discount do not fit '
          f'the dtypes of the rewards ({ret.dtype}) and discounts '
          f'({total.dtype}) ({e}); give floating-point rewards and '
          'discounts, as Acme requires') from None
    return ret, total

  def _add(self, action, next_timestep, extras):
    self._has_extras = bool(_tree.flatten(extras))
    step = {'action': action}
    if self._has_extras:
      step['extras'] = extras
    for value, what in ((next_timestep.reward, 'reward'),
                        (next_timestep.discount, 'discount')):
      if _tree._is_nested(value):  # pylint: disable=protected-access
        raise TypeError(
            f'NStepTransitionAdder: the {what} is a nest '
            f'({type(value).__name__}); reverie takes arrays or scalars only '
            '(Acme also takes nests)')
    self._writer.append(step)  # completes step t
    self._rewards.append(next_timestep.reward)
    self._discounts.append(next_timestep.discount)
    self._t += 1
    first = max(0, self._t - self.n_step)
    ret, total = self._returns(first)
    self._writer.append(
        {'observation': next_timestep.observation, 'n_step_return': ret,
         'total_discount': total}, partial_step=True)
    self._write(first, self._t)

  def _write(self, first, last):
    h = self._writer.history
    self._create_item(Transition(
        observation=_pick(h['observation'], first),
        action=_pick(h['action'], first),
        reward=h['n_step_return'][-1],
        discount=h['total_discount'][-1],
        next_observation=_pick(h['observation'], last),
        extras=_pick(h['extras'], first) if self._has_extras else ()))

  def _write_last(self):
    last = self._t
    self._writer.append({})  # closes the final observation's step
    for first in range(max(0, last - self.n_step) + 1, last):
      ret, total = self._returns(first)
      self._writer.append({'n_step_return': ret, 'total_discount': total})
      self._write(first, last)


_END_BEHAVIORS = ('zero_pad', 'truncate', 'write')


class SequenceAdder(Adder):
  """Writes fixed-length sequences of steps every ``period`` steps.

  The episode is a list of :class:`Step` (observation, action, reward,
  discount, start_of_episode, extras): step t holds o_t, the action a_t
  taken there, r_t and d_t; a final step holds the last observation with
  zeros for action, reward, discount and extras. The sequence of steps
  [s, s + sequence_length) is written for s = 0, period, 2 * period, ...
  as soon as its last step is added.

  At the end of an episode, when the last step is not covered by a written
  sequence, ``end_of_episode_behavior`` decides:

  * 'zero_pad' (``pad_end_of_episode=True``, the default): the episode is
    padded with all-zero steps up to the end of the next sequence, which is
    written (so every item has sequence_length steps);
  * 'truncate' (``pad_end_of_episode=False``): the next sequence is written
    with the steps there are (shorter than sequence_length);
  * 'write': the last sequence_length steps of the episode are written (so
    they overlap the sequence before by more than usual); an episode
    shorter than sequence_length is dropped.

  With 'zero_pad' and 'truncate', nothing is written when that next
  sequence would start after the episode's last step (period >
  sequence_length), where Acme writes an item of padding alone
  ('zero_pad') or of steps from outside that sequence ('truncate').

  These are Acme's ``EndBehavior.ZERO_PAD``, ``TRUNCATE`` and ``WRITE``
  (its enum may be passed as it is). With sequence_length 3, period 2 and
  steps 0..5, the last items are [4, 5, zeros], [4, 5] and [3, 4, 5].

  Sequences never span episodes.
  """

  def __init__(self, client, sequence_length: int, period: int, *,
               delta_encoded: bool = False, priority_fns=None,
               max_in_flight_items: int = 2,
               end_of_episode_behavior: Optional[str] = None,
               pad_end_of_episode: bool = True,
               break_end_of_episode: bool = True,
               validate_items: bool = True,
               chunk_length: Optional[int] = None,
               get_signature_timeout_ms: int = 300_000):
    # chunk_length is deprecated and unused in Acme too; reverie's writer
    # fetches no signature, so get_signature_timeout_ms has nothing to
    # bound. Both are taken so that Acme's calls work unchanged.
    del chunk_length, get_signature_timeout_ms
    if sequence_length < 1 or period < 1:
      raise ValueError('sequence_length and period must be >= 1, got '
                       f'{sequence_length} and {period}')
    if not break_end_of_episode:
      raise NotImplementedError(
          'sequences that span episodes (break_end_of_episode=False) are not '
          'supported')
    if end_of_episode_behavior is None:
      end_of_episode_behavior = 'zero_pad' if pad_end_of_episode else (
          'truncate')
    end_of_episode_behavior = str(getattr(
        end_of_episode_behavior, 'name', end_of_episode_behavior)).lower()
    if end_of_episode_behavior not in _END_BEHAVIORS:
      raise ValueError(
          f'end_of_episode_behavior must be one of {_END_BEHAVIORS}, got '
          f'{end_of_episode_behavior!r}')
    self._sequence_length = sequence_length
    self._period = period
    self._end_behavior = end_of_episode_behavior
    super().__init__(client, max_sequence_length=sequence_length,
                     max_in_flight_items=max_in_flight_items,
                     priority_fns=priority_fns, delta_encoded=delta_encoded,
                     validate_items=validate_items)
    self._last_step = None

  def _reset(self):
    self._last_step = None

  def _add_first(self, timestep):
    self._writer.append(
        {'observation': timestep.observation, 'start_of_episode': True},
        partial_step=True)

  def _add(self, action, next_timestep, extras):
    rest = {'action': action, 'reward': next_timestep.reward,
            'discount': next_timestep.discount, 'extras': extras}
    self._writer.append(rest)
    self._last_step = rest
    self._maybe_write()
    self._writer.append(
        {'observation': next_timestep.observation, 'start_of_episode': False},
        partial_step=True)
    if _is(next_timestep, 'last', StepType.LAST):
      self._writer.append(_zeros_like(rest))
      self._maybe_write()

  def _window(self, length):
    h = self._writer.history
    cols = {k: _tree.map_structure(lambda c: c[-length:], h[k])
            for k in ('observation', 'action', 'reward', 'discount',
                      'start_of_episode')}
    extras = h.get('extras', ()) if isinstance(h, dict) else ()
    return Step(extras=_tree.map_structure(lambda c: c[-length:], extras),
                **cols)

  def _maybe_write(self):
    n = self._writer.episode_steps
    length, period = self._sequence_length, self._period
    if n >= length and (n - length) % period == 0:
      self._create_item(self._window(length))

  def _write_last(self):
    n = self._writer.episode_steps
    length, period = self._sequence_length, self._period
    if n >= length and (n - length) % period == 0:
      return  # the last step ends a written sequence
    delta = length - n if n < length else (period - (n - length) % period)
    if delta >= length and self._end_behavior != 'write':
      # With period > sequence_length the next window may start after the
      # episode's last step: it would hold no step of the episode.
      return
    if self._end_behavior == 'truncate':
      # The steps since the last sequence's window would have moved on.
      self._create_item(self._window(length - delta))
      return
    if self._end_behavior == 'write':
      # The last sequence_length steps; a shorter episode is dropped.
      if n >= length:
        self._create_item(self._window(length))
      return
    h = self._writer.history
    zero = {'observation': _zeros_like(_numpy_last(h['observation'])),
            'start_of_episode': False, **_zeros_like(self._last_step)}
    for _ in range(delta):
      self._writer.append(zero)
    self._create_item(self._window(length))


def _numpy_last(history):
  return _tree.map_structure(lambda c: c[-1].numpy(), history)


class EpisodeAdder(Adder):
  """Writes every episode as one item of :class:`Step` columns.

  Steps are as in :class:`SequenceAdder` (a final step holds the last
  observation with zeros elsewhere), so an episode of T actions is an item
  of T + 1 steps; it must not exceed ``max_sequence_length`` (ValueError).
  With ``padding_fn(shape, dtype)`` every item is padded to
  max_sequence_length steps with its values (start_of_episode is False
  in padding steps, whatever padding_fn gives).
  """

  def __init__(self, client, max_sequence_length: int,
               delta_encoded: bool = False, priority_fns=None,
               max_in_flight_items: int = 1,
               padding_fn: Optional[Callable[..., np.ndarray]] = None,
               chunk_length: Optional[int] = None, *,
               validate_items: bool = True):
    # The positional order is Acme's; chunk_length is deprecated and
    # unused there too.
    del chunk_length
    if max_sequence_length < 1:
      raise ValueError(
          f'max_sequence_length must be >= 1, got {max_sequence_length}')
    super().__init__(client, max_sequence_length=max_sequence_length,
                     max_in_flight_items=max_in_flight_items,
                     priority_fns=priority_fns, delta_encoded=delta_encoded,
                     validate_items=validate_items)
    self._padding_fn = padding_fn

  def _add_first(self, timestep):
    self._writer.append(
        {'observation': timestep.observation, 'start_of_episode': True},
        partial_step=True)

  def _add(self, action, next_timestep, extras):
    if self._writer.episode_steps + 2 > self._max_sequence_length:
      raise ValueError(
          'The number of observations within the same episode will exceed '
          f'max_sequence_length ({self._max_sequence_length}) with the '
          'addition of this transition.')
    rest = {'action': action, 'reward': next_timestep.reward,
            'discount': next_timestep.discount, 'extras': extras}
    self._writer.append(rest)
    self._writer.append(
        {'observation': next_timestep.observation, 'start_of_episode': False},
        partial_step=True)
    if _is(next_timestep, 'last', StepType.LAST):
      self._writer.append(_zeros_like(rest))

  def _write_last(self):
    n = self._writer.episode_steps
    if self._padding_fn is not None and n < self._max_sequence_length:
      # Padding steps have padding_fn's values of the last step's shapes
      # and dtypes, and are no episode's start (as Acme's).
      h = self._writer.history
      pad = {k: _tree.map_structure(
          lambda c: self._padding_fn(c[-1].shape, c[-1].dtype), v)
             for k, v in h.items() if k != 'start_of_episode'}
      pad['start_of_episode'] = False
      for _ in range(self._max_sequence_length - n):
        self._writer.append(pad)
      n = self._max_sequence_length
    h = self._writer.history
    cols = {k: _tree.map_structure(lambda c: c[-n:], h[k])
            for k in ('observation', 'action', 'reward', 'discount',
                      'start_of_episode')}
    extras = _tree.map_structure(lambda c: c[-n:], h.get('extras', ()))
    self._create_item(Step(extras=extras, **cols))
