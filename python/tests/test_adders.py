"""Acme-style adders: the items they write, checked against values worked
out by hand (in the comments) after a round trip through the server."""

import enum
import gc
import threading
import time

import numpy as np
import pytest

import reverie
from reverie import _tree
from reverie import adders

GAMMA = 0.5


def _episode(adder, rewards, discounts, extras=None):
  """Runs one episode: observation o_t = [t, 10 t], action a_t = 10 + t."""
  obs = lambda t: np.array([t, 10 * t], np.float32)
  adder.add_first(adders.restart(obs(0)))
  n = len(rewards)
  for t in range(n):
    kind = adders.StepType.LAST if t == n - 1 else adders.StepType.MID
    ts = adders.TimeStep(kind, np.float32(rewards[t]), np.float32(discounts[t]),
                         obs(t + 1))
    e = extras(t) if extras else ()
    adder.add(np.int32(10 + t), ts, e)


def _read(client, table, n, template):
  samples = list(client.sample(table, n, emit_timesteps=False, timeout=10))
  return [(s.info, _tree.unflatten_as(template, s.data)) for s in samples]


def _transition_template(extras=()):
  return adders.Transition(None, None, None, None, None, extras)


def _check_transitions(got, want):
  assert len(got) == len(want)
  for (_, tr), (s, a, r, d, s2) in zip(got, want):
    np.testing.assert_array_equal(tr.observation, [s, 10 * s])
    assert tr.action == 10 + a and tr.action.dtype == np.int32
    assert tr.reward == pytest.approx(r) and tr.reward.dtype == np.float32
    assert tr.discount == pytest.approx(d) and tr.discount.dtype == np.float32
    assert tr.reward.shape == () and tr.discount.shape == ()
    np.testing.assert_array_equal(tr.next_observation, [s2, 10 * s2])


def test_n_step_transitions(client, reset):
  reset('adder')
  adder = adders.NStepTransitionAdder(
      client, n_step=3, discount=GAMMA, priority_fns={'adder': None})
  # r = 1, 2, 4, 8, 16; d = 1, 1, 1, 1, 0 (termination); g = 0.5.
  _episode(adder, [1, 2, 4, 8, 16], [1, 1, 1, 1, 0])
  got = _read(client, 'adder', 7, _transition_template())
  _check_transitions(got, [
      # (first state, action index, R, D, next state)
      (0, 0, 1, 1, 1),                   # R = r0, D = d0
      (0, 0, 1 + .5 * 2, .5, 2),         # R = r0 + g r1 = 2, D = g
      (0, 0, 1 + 1 + .25 * 4, .25, 3),   # 3, g^2
      (1, 1, 2 + 2 + 2, .25, 4),         # r1 + g r2 + g^2 r3 = 6
      (2, 2, 4 + 4 + 4, 0, 5),           # r2 + g r3 + g^2 r4 = 12, d4 = 0
      (3, 3, 8 + 8, 0, 5),               # the shorter ones ending at s5
      (4, 4, 16, 0, 5),
  ])
  adder.close()


def test_one_step_transitions_with_extras(client, reset):
  reset('adder')
  adder = adders.NStepTransitionAdder(
      client, n_step=1, discount=GAMMA, priority_fns={'adder': None})
  _episode(adder, [1, 2, 3], [1, 1, 0],
           extras=lambda t: {'logp': np.float32(-t)})
  got = _read(client, 'adder', 3, _transition_template({'logp': None}))
  # n = 1: plain (s_t, a_t, r_t, d_t, s_{t+1}) with the environment's d_t.
  _check_transitions(got, [(0, 0, 1, 1, 1), (1, 1, 2, 1, 2),
                           (2, 2, 3, 0, 3)])
  assert [float(tr.extras['logp']) for _, tr in got] == [0, -1, -2]
  adder.close()


def test_n_step_discounts_inside_the_window(client, reset):
  reset('adder')
  adder = adders.NStepTransitionAdder(
      client, n_step=2, discount=GAMMA, priority_fns={'adder': None})
  # r = 1, 2, 3; d = 0.5, 1, 1 (truncated: the last discount is 1).
  _episode(adder, [1, 2, 3], [.5, 1, 1])
  got = _read(client, 'adder', 4, _transition_template())
  _check_transitions(got, [
      (0, 0, 1, .5, 1),                  # D = d0
      (0, 0, 1 + .5 * .5 * 2, .25, 2),   # r0 + g d0 r1 = 1.5, g d0 d1
      (1, 1, 2 + .5 * 3, .5, 3),         # r1 + g d1 r2 = 3.5, g d1 d2
      (2, 2, 3, 1, 3),                   # r2, d2
  ])
  adder.close()


def test_priorities_and_several_tables(client, reset):
  reset('adder', 'adder2')
  adder = adders.NStepTransitionAdder(
      client, n_step=1, discount=GAMMA,
      priority_fns={'adder': lambda tr: tr.reward + 0.5, 'adder2': None})
  _episode(adder, [1, 2], [1, 0])
  got = _read(client, 'adder', 2, _transition_template())
  assert [info.priority for info, _ in got] == [1.5, 2.5]
  got2 = _read(client, 'adder2', 2, _transition_template())
  assert [info.priority for info, _ in got2] == [1.0, 1.0]
  adder.close()


@pytest.mark.parametrize('fns', [None, {}])
def test_default_table(client, reset, fns):
  # As Acme: no priority_fns, or an empty mapping, means the default table
  # with priority 1 (an empty mapping wrote nothing before).
  reset(adders.DEFAULT_PRIORITY_TABLE)
  adder = adders.NStepTransitionAdder(client, n_step=1, discount=GAMMA,
                                      priority_fns=fns)
  _episode(adder, [1, 2], [1, 0])
  got = _read(client, adders.DEFAULT_PRIORITY_TABLE, 2,
              _transition_template())
  assert [info.priority for info, _ in got] == [1.0, 1.0]
  adder.close()


def test_n_step_returns_round_as_acmes(client, reset):
  # Acme sums in the rewards' and discounts' own dtypes, in place, with the
  # discount as a float32; R and D must be those bits, not float64 sums
  # rounded once (D was float32(0.81) here, where Acme stores
  # float32(0.9) * float32(0.9) = 0.80999994).
  reset('adder')
  g = np.float32(0.9)
  adder = adders.NStepTransitionAdder(
      client, n_step=3, discount=0.9, priority_fns={'adder': None})
  _episode(adder, [1, 1, 1, 1], [1, 1, 1, 0])
  got = _read(client, 'adder', 6, _transition_template())
  _, tr = got[2]  # (s0 -> s3): three steps
  assert tr.discount.dtype == np.float32 and tr.discount == g * g
  assert tr.discount != np.float32(0.81)
  assert tr.reward == (np.float32(1) + g) + g * g
  adder.close()

  # Python floats are float64 columns: Acme multiplies them by the float32
  # discount, so D is float64(float32(0.99)) squared, not 0.99 squared.
  reset('adder')
  adder = adders.NStepTransitionAdder(
      client, n_step=3, discount=0.99, priority_fns={'adder': None})
  obs = lambda t: np.array([t, 10 * t], np.float32)
  adder.add_first(adders.restart(obs(0)))
  for t in range(3):
    kind = adders.StepType.LAST if t == 2 else adders.StepType.MID
    adder.add(np.int32(10 + t), adders.TimeStep(kind, 1.0, 1.0, obs(t + 1)))
  got = _read(client, 'adder', 5, adders.Transition(None, None, None, None,
                                                    None, ()))
  _, tr = got[2]
  g64 = np.float64(np.float32(0.99))
  assert tr.discount.dtype == np.float64 and tr.discount == g64 * g64
  adder.close()


def test_n_step_refuses_what_acme_cannot_sum(client):
  adder = adders.NStepTransitionAdder(
      client, n_step=2, discount=GAMMA, priority_fns={'adder': None})
  obs = np.zeros(2, np.float32)
  adder.add_first(adders.restart(obs))
  # A nested reward: a clear error (reverie takes arrays only).
  with pytest.raises(TypeError, match='reward is a nest'):
    adder.add(np.int32(0), adders.TimeStep(adders.StepType.MID,
                                           {'a': np.float32(1)},
                                           np.float32(1), obs))
  adder.reset()
  # Integer rewards: an n-step return does not fit them (Acme fails too).
  adder.add_first(adders.restart(obs))
  adder.add(np.int32(0), adders.TimeStep(adders.StepType.MID, np.int32(1),
                                         np.float32(1), obs))
  with pytest.raises(TypeError, match='floating-point rewards'):
    adder.add(np.int32(1), adders.TimeStep(adders.StepType.MID, np.int32(2),
                                           np.float32(1), obs))
  adder.close()
  # Integer discounts: the message names both dtypes.
  adder = adders.NStepTransitionAdder(
      client, n_step=2, discount=GAMMA, priority_fns={'adder': None})
  adder.add_first(adders.restart(obs))
  adder.add(np.int32(0), adders.TimeStep(adders.StepType.MID, np.float32(1),
                                         1, obs))
  with pytest.raises(TypeError, match=r'discounts \(int64\)'):
    adder.add(np.int32(1), adders.TimeStep(adders.StepType.MID, np.float32(2),
                                           1, obs))
  adder.close()


def test_acme_arguments(client):
  # Acme's calls work unchanged: EpisodeAdder's arguments by position, and
  # the deprecated chunk_length and get_signature_timeout_ms, unused.
  for adder in (
      adders.EpisodeAdder(client, 10, False, {'adder': None}, 1, None),
      adders.EpisodeAdder(client, 10, chunk_length=5),
      adders.SequenceAdder(client, 3, 2, chunk_length=5,
                           get_signature_timeout_ms=1000)):
    adder.close()


_ADDERS = {
    'n_step': lambda c: adders.NStepTransitionAdder(
        c, n_step=2, discount=GAMMA, priority_fns={'adder': None}),
    'sequence': lambda c: adders.SequenceAdder(
        c, sequence_length=2, period=1, priority_fns={'adder': None}),
    'episode': lambda c: adders.EpisodeAdder(
        c, max_sequence_length=4, priority_fns={'adder': None}),
}


@pytest.mark.parametrize('kind', sorted(_ADDERS))
def test_extras_none_is_no_extras(client, reset, kind):
  # Acme takes extras=None as no extras: the items are those of extras=().
  got = {}
  for extras in ((), None):
    reset('adder')
    adder = _ADDERS[kind](client)
    _episode(adder, [1, 2, 3], [1, 1, 0], extras=lambda t, e=extras: e)
    adder.close()
    n = client.server_info(timeout=10)['adder'].current_size
    got[extras] = [[x.tolist() for x in s.data] for s in client.sample(
        'adder', n, emit_timesteps=False, timeout=10)]
  assert got[()] and got[None] == got[()]
  assert len(got[()][0]) == 5  # observation, action, reward, discount, ...


def _step_template():
  return adders.Step(None, None, None, None, None, ())


def _check_steps(got, want):
  assert len(got) == len(want)
  for (_, st), (obs, act, rew, disc, start) in zip(got, want):
    np.testing.assert_array_equal(st.observation[:, 0], obs)
    np.testing.assert_array_equal(st.observation[:, 1], np.array(obs) * 10)
    np.testing.assert_array_equal(st.action, act)
    np.testing.assert_array_equal(st.reward, rew)
    np.testing.assert_array_equal(st.discount, disc)
    np.testing.assert_array_equal(st.start_of_episode, start)
    assert st.action.dtype == np.int32 and st.reward.dtype == np.float32
    assert st.start_of_episode.dtype == np.bool_


# One episode of 5 actions gives 6 steps; step t = (o_t, a_t = 10 + t,
# r_t = t + 1, d_t, start), step 5 = (o_5, 0, 0, 0, False).
EPISODE = ([1, 2, 3, 4, 5], [1, 1, 1, 1, 0])
T, F = True, False


@pytest.mark.parametrize('behavior,want', [
    # Length 3 every 2 steps: [0, 3) when step 2 is added, [2, 5) at step 4;
    # step 5 is not covered, so [4, 7) is padded with one zero step.
    ('zero_pad', [
        ([0, 1, 2], [10, 11, 12], [1, 2, 3], [1, 1, 1], [T, F, F]),
        ([2, 3, 4], [12, 13, 14], [3, 4, 5], [1, 1, 0], [F, F, F]),
        ([4, 5, 0], [14, 0, 0], [5, 0, 0], [0, 0, 0], [F, F, F]),
    ]),
    # Acme's TRUNCATE: the steps the next window would have held.
    ('truncate', [
        ([0, 1, 2], [10, 11, 12], [1, 2, 3], [1, 1, 1], [T, F, F]),
        ([2, 3, 4], [12, 13, 14], [3, 4, 5], [1, 1, 0], [F, F, F]),
        ([4, 5], [14, 0], [5, 0], [0, 0], [F, F]),
    ]),
    # Acme's WRITE: the last sequence_length steps.
    ('write', [
        ([0, 1, 2], [10, 11, 12], [1, 2, 3], [1, 1, 1], [T, F, F]),
        ([2, 3, 4], [12, 13, 14], [3, 4, 5], [1, 1, 0], [F, F, F]),
        ([3, 4, 5], [13, 14, 0], [4, 5, 0], [1, 0, 0], [F, F, F]),
    ]),
])
def test_sequences(client, reset, behavior, want):
  reset('adder')
  adder = adders.SequenceAdder(
      client, sequence_length=3, period=2, priority_fns={'adder': None},
      end_of_episode_behavior=behavior)
  _episode(adder, *EPISODE)
  _check_steps(_read(client, 'adder', len(want), _step_template()), want)
  assert client.server_info(timeout=10)['adder'].current_size == 0
  adder.close()


class _AcmeEndBehavior(enum.Enum):
  """Acme's EndBehavior, by name and value (Acme is not installed here)."""
  WRITE = 'write_buffer'
  ZERO_PAD = 'zero_pad_til_next_write'
  TRUNCATE = 'write_truncated_buffer'


@pytest.mark.parametrize('behavior,want', [
    ('zero_pad', [([0, 1, 0], [10, 0, 0], [7, 0, 0], [0, 0, 0], [T, F, F])]),
    ('truncate', [([0, 1], [10, 0], [7, 0], [0, 0], [T, F])]),
    ('write', []),  # shorter than sequence_length: dropped
    (_AcmeEndBehavior.TRUNCATE, [([0, 1], [10, 0], [7, 0], [0, 0], [T, F])]),
])
def test_sequences_of_a_short_episode(client, reset, behavior, want):
  reset('adder')
  adder = adders.SequenceAdder(
      client, sequence_length=3, period=2, priority_fns={'adder': None},
      end_of_episode_behavior=behavior)
  _episode(adder, [7], [0])  # 2 steps
  adder.close()
  assert client.server_info(timeout=10)['adder'].current_size == len(want)
  _check_steps(_read(client, 'adder', len(want), _step_template()), want)


@pytest.mark.parametrize('period,steps,behavior,want', [
    # Length 2 every 5 steps: [0, 2) is written; the next window, [5, 7),
    # holds no step of an episode of 3 or 4 steps, so nothing more is.
    (5, 3, 'zero_pad', [[0, 1]]),
    (5, 4, 'zero_pad', [[0, 1]]),
    (5, 3, 'truncate', [[0, 1]]),
    (5, 4, 'truncate', [[0, 1]]),
    (5, 4, 'write', [[0, 1], [2, 3]]),  # the last 2 steps
    # Every 3 steps: the next window, [3, 5), holds step 3 of 4.
    (3, 4, 'zero_pad', [[0, 1], [3, 0]]),
    (3, 4, 'truncate', [[0, 1], [3]]),
])
def test_sequences_with_a_period_longer_than_the_sequence(
    client, reset, period, steps, behavior, want):
  reset('adder')
  adder = adders.SequenceAdder(
      client, sequence_length=2, period=period, priority_fns={'adder': None},
      end_of_episode_behavior=behavior)
  _episode(adder, [1] * (steps - 1), [1] * (steps - 2) + [0])
  adder.close()
  assert client.server_info(timeout=10)['adder'].current_size == len(want)
  got = _read(client, 'adder', len(want), _step_template())
  assert [st.observation[:, 0].tolist() for _, st in got] == want


def test_sequences_without_overlap_and_two_episodes(client, reset):
  reset('adder')
  adder = adders.SequenceAdder(client, sequence_length=3, period=3,
                               priority_fns={'adder': None})
  _episode(adder, *EPISODE)  # steps 0..5: [0, 3) and [3, 6), no padding
  _episode(adder, [7], [0])  # 2 steps: padded to 3
  _check_steps(_read(client, 'adder', 3, _step_template()), [
      ([0, 1, 2], [10, 11, 12], [1, 2, 3], [1, 1, 1], [T, F, F]),
      ([3, 4, 5], [13, 14, 0], [4, 5, 0], [1, 0, 0], [F, F, F]),
      ([0, 1, 0], [10, 0, 0], [7, 0, 0], [0, 0, 0], [T, F, F]),
  ])
  adder.close()


def test_episodes(client, reset):
  reset('adder')
  adder = adders.EpisodeAdder(client, max_sequence_length=6,
                              priority_fns={'adder': None})
  _episode(adder, *EPISODE)
  _check_steps(_read(client, 'adder', 1, _step_template()), [
      ([0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 0], [1, 2, 3, 4, 5, 0],
       [1, 1, 1, 1, 0, 0], [T, F, F, F, F, F])])
  with pytest.raises(ValueError, match='max_sequence_length'):
    _episode(adder, [1] * 6, [1] * 5 + [0])
  adder.close()


def test_episodes_padded(client, reset):
  reset('adder')
  adder = adders.EpisodeAdder(client, max_sequence_length=5,
                              padding_fn=np.zeros,
                              priority_fns={'adder': None})
  _episode(adder, [1, 2], [1, 0])
  _check_steps(_read(client, 'adder', 1, _step_template()), [
      ([0, 1, 2, 0, 0], [10, 11, 0, 0, 0], [1, 2, 0, 0, 0], [1, 0, 0, 0, 0],
       [T, F, F, F, F])])
  adder.close()


def test_episode_padding_is_no_start_of_episode(client, reset):
  # As Acme's: padding_fn pads every field but start_of_episode, which is
  # False in padding steps (np.ones would make each one a start).
  reset('adder')
  adder = adders.EpisodeAdder(client, max_sequence_length=5,
                              padding_fn=np.ones,
                              priority_fns={'adder': None})
  _episode(adder, [1, 2], [1, 0])
  adder.close()
  ((_, st),) = _read(client, 'adder', 1, _step_template())
  np.testing.assert_array_equal(st.start_of_episode, [T, F, F, F, F])
  assert st.start_of_episode.dtype == np.bool_
  np.testing.assert_array_equal(st.action, [10, 11, 0, 1, 1])
  np.testing.assert_array_equal(st.observation[3:], np.ones((2, 2)))
  np.testing.assert_array_equal(st.reward, [1, 2, 0, 1, 1])


def test_adder_misuse(client):
  adder = adders.NStepTransitionAdder(client, 1, GAMMA,
                                      priority_fns={'adder': None})
  with pytest.raises(ValueError, match='add_first'):
    adder.add(np.int32(0), adders.transition(1.0, np.zeros(2)))
  with pytest.raises(ValueError, match='first'):
    adder.add_first(adders.transition(1.0, np.zeros(2)))
  with pytest.raises(NotImplementedError):
    adders.SequenceAdder(client, 3, 1, break_end_of_episode=False)
  adder.close()


def _mid_episode(adder, n):
  """add_first, then n adds that do not end the episode."""
  adder.add_first(adders.restart(np.zeros(2, np.float32)))
  for t in range(n):
    adder.add(np.int32(t), adders.transition(np.float32(t),
                                             np.full(2, t + 1, np.float32)))


def test_dropped_adder_keeps_its_items(client, reset):
  # Acme's adders have no close(), so code ported from Acme drops them
  # mid-episode. As Acme's, the adder flushes before its writer closes:
  # the table holds every item, not all but the unconfirmed ones.
  reset('adder')
  adder = adders.NStepTransitionAdder(
      client, n_step=3, discount=GAMMA, priority_fns={'adder': None})
  _mid_episode(adder, 20)
  del adder
  gc.collect()
  deadline = time.monotonic() + 10
  while (client.server_info(timeout=10)['adder'].current_size < 20 and
         time.monotonic() < deadline):
    time.sleep(0.05)
  assert client.server_info(timeout=10)['adder'].current_size == 20


def _writer_threads():
  return sum(t.name == 'reverie-trajectory-writer' and t.is_alive()
             for t in threading.enumerate())


@pytest.mark.reverie_only
def test_adder_close_is_bounded_when_the_server_is_gone(own_reverie,
                                                       monkeypatch):
  srv = own_reverie()
  c = reverie.Client(srv.address)
  before = _writer_threads()
  a1 = adders.NStepTransitionAdder(c, n_step=1, discount=GAMMA,
                                   priority_fns={'adder': None})
  a2 = adders.NStepTransitionAdder(c, n_step=1, discount=GAMMA,
                                   priority_fns={'adder': None})
  for a in (a1, a2):
    _mid_episode(a, 1)
  srv.stop()
  for a in (a1, a2):  # an item the server cannot confirm
    a.add(np.int32(1), adders.transition(np.float32(1),
                                         np.full(2, 2, np.float32)))
  start = time.monotonic()
  with pytest.raises(reverie.DeadlineExceededError):
    a1.close(timeout_ms=300)
  assert time.monotonic() - start < 5
  # `with adder:` closes with the default timeout (shortened here).
  monkeypatch.setattr(adders.Adder.close, '__defaults__', (300,))
  start = time.monotonic()
  with pytest.raises(reverie.DeadlineExceededError):
    with a2:
      pass
  assert time.monotonic() - start < 5
  deadline = time.monotonic() + 5
  while _writer_threads() > before and time.monotonic() < deadline:
    time.sleep(0.05)
  assert _writer_threads() <= before
  c.close()
