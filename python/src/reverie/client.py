"""reverie.Client: the connection to a Reverb-compatible server."""

import dataclasses
import functools
import threading
from typing import Any, Dict, Iterable, Mapping, Optional

import grpc

from reverie import _channel
from reverie import _keys
from reverie import _tree
from reverie import encoding
from reverie import errors
from reverie import sampler as sampler_lib
from reverie import specs
from reverie._proto.deepmind.reverb import reverb_service_pb2
from reverie._proto.deepmind.reverb import reverb_service_pb2_grpc
from reverie._proto.deepmind.reverb import schema_pb2

_pb = reverb_service_pb2

# As Reverb's client: unlimited message sizes, round_robin over every
# address a name resolves to, reconnect backoff up to 30 s.
_CHANNEL_OPTIONS = (
    ('grpc.max_send_message_length', -1),
    ('grpc.max_receive_message_length', -1),
    ('grpc.lb_policy_name', 'round_robin'),
    ('grpc.max_reconnect_backoff_ms', 30_000),
    ('grpc.enable_retries', 0),
)


@dataclasses.dataclass
class TableInfo:
  """One table as ServerInfo describes it (dm-reverb's TableInfo fields).

  ``signature`` is a nest of :class:`reverie.TensorSpec` or None; the
  option and statistics fields are the protocol buffer messages.
  """
  name: str
  sampler_options: Any
  remover_options: Any
  max_size: int
  max_times_sampled: int
  rate_limiter_info: Any
  signature: Any
  current_size: int
  num_episodes: int
  num_deleted_episodes: int
  num_unique_samples: int
  table_worker_time: Any

  @classmethod
  def from_proto(cls, proto):
    signature = None
    if proto.HasField('signature'):
      signature = specs.decode(proto.signature)
    return cls(
        name=proto.name,
        sampler_options=proto.sampler_options,
        remover_options=proto.remover_options,
        max_size=proto.max_size,
        max_times_sampled=proto.max_times_sampled,
        rate_limiter_info=proto.rate_limiter_info,
        signature=signature,
        current_size=proto.current_size,
        num_episodes=proto.num_episodes,
        num_deleted_episodes=proto.num_deleted_episodes,
        num_unique_samples=proto.num_unique_samples,
        table_worker_time=proto.table_worker_time)


new_key = _keys.new_key


def _make_channel(address, options, tls, tls_client_cert, token):
  """A plaintext channel, or a TLS one with the token's call credentials."""
  if not tls:
    if tls_client_cert is not None:
      raise ValueError('tls_client_cert needs tls')
    if token is not None:
      raise ValueError('token needs tls: a bearer token is never sent in '
                       'plaintext')
    return grpc.insecure_channel(address, options=options)
  if tls is True:
    roots = None
  elif isinstance(tls, (bytes, bytearray)):
    roots = bytes(tls)
  else:
    raise TypeError(f'tls: want a bool or PEM bytes, got {type(tls).__name__}')
  key = chain = None
  if tls_client_cert is not None:
    chain, key = tls_client_cert
  creds = grpc.ssl_channel_credentials(
      root_certificates=roots, private_key=key, certificate_chain=chain)
  if token is not None:
    if not token or any(c.isspace() for c in token):
      raise ValueError('token: want a non-empty token without spaces')
    creds = grpc.composite_channel_credentials(
        creds, grpc.access_token_call_credentials(token))
  return grpc.secure_channel(address, creds, options=options)


class Client:
  """A connection to a reverie or Reverb server, as ``reverb.Client``.

  The connection is made lazily. A Client is safe to share between threads;
  writers, samplers and datasets made from it share its gRPC channel.

  Calls that wait for the server take ``timeout`` in seconds (None: no
  limit, as dm-reverb). Unary calls wait for the connection to be ready; if
  the timeout passes while the server cannot be reached they raise
  :class:`reverie.ServerUnavailableError`, else
  :class:`reverie.DeadlineExceededError`.

  Args:
    server_address: "host:port" (or any gRPC target, e.g. "unix:///path").
    channel_options: extra gRPC channel arguments, appended to reverie's.
    tls: connect with TLS: True trusts the system's root CAs; bytes are
      the PEM CA certificates to trust instead. False (the default) is
      plaintext, as Reverb serves.
    tls_client_cert: for mutual TLS, a (certificate chain PEM, private key
      PEM) pair of bytes. Needs ``tls``.
    token: a bearer token sent with every call ("authorization: Bearer
      TOKEN"), for a server started with ``--auth-token-file``. Needs
      ``tls``: a token is never sent in plaintext.
  """

  def __init__(self, server_address: str, *, channel_options=(), tls=False,
               tls_client_cert=None, token=None):
    self._server_address = server_address
    self._security = dict(tls=tls, tls_client_cert=tls_client_cert,
                          token=token)
    self._channel_options = tuple(channel_options)
    options = list(_CHANNEL_OPTIONS) + list(channel_options)
    self._channel = _make_channel(server_address, options, tls,
                                  tls_client_cert, token)
    self._stub = reverb_service_pb2_grpc.ReverbServiceStub(self._channel)
    self._lock = threading.Lock()
    self._closed = False
    self._signature_cache = {}

  def __reduce__(self):
    return functools.partial(self.__class__, **self._security,
                             channel_options=self._channel_options), (
                                 self._server_address,)

  def __repr__(self):
    return f'reverie.Client(server_address={self._server_address!r})'

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  @property
  def server_address(self) -> str:
    return self._server_address

  @property
  def closed(self) -> bool:
    return self._closed

  def close(self):
    """Closes the channel; writers and samplers of the client fail."""
    with self._lock:
      if self._closed:
        return
      self._closed = True
    self._channel.close()

  def _check_open(self):
    if self._closed:
      raise errors.ClosedError(f'{self!r} is closed')

  def _probe(self):
    """None if the server answers a fail-fast ServerInfo within 1 s, else
    the error gRPC gave (e.g. "failed to connect to all addresses")."""
    try:
      self._stub.ServerInfo(_pb.ServerInfoRequest(), timeout=1.0,
                            wait_for_ready=False)
      return None
    except grpc.RpcError as e:
      return e

  def _rpc_error(self, e, what, timeout=None):
    """Maps a failed call. A deadline that passed while the server could not
    be reached becomes ServerUnavailableError with gRPC's reason."""
    code = e.code() if hasattr(e, 'code') else None
    if (code == grpc.StatusCode.DEADLINE_EXCEEDED and
        errors.RATE_LIMITER_TIMEOUT_TEXT not in (e.details() or '') and
        not self._closed):
      probe = self._probe()
      if probe is not None:
        details = probe.details() or e.details()
        return errors.ServerUnavailableError(
            f'{what}: could not reach the server at {self._server_address} '
            f'within {timeout}s: {details} [{probe.code().name}]',
            code=probe.code(), details=details)
    return errors.from_rpc_error(e, what)

  def _unary(self, method, request, timeout, what):
    self._check_open()
    try:
      return method(request, timeout=timeout, wait_for_ready=True)
    except grpc.RpcError as e:
      raise self._rpc_error(e, what, timeout) from None

  # --- unary calls -------------------------------------------------------

  def server_info(self, timeout: Optional[float] = None
                 ) -> Dict[str, TableInfo]:
    """Every table of the server, by name.

    Args:
      timeout: seconds to wait for the answer; None (or 0) waits forever.
    """
    resp = self._unary(self._stub.ServerInfo, _pb.ServerInfoRequest(),
                       timeout or None, 'server_info')
    infos = {}
    for proto in resp.table_info:
      info = TableInfo.from_proto(proto)
      infos[info.name] = info
    with self._lock:
      self._signature_cache = {n: i.signature for n, i in infos.items()}
    return infos

  def mutate_priorities(self,
                        table: str,
                        updates: Optional[Mapping[int, float]] = None,
                        deletes: Optional[Iterable[int]] = None,
                        *,
                        timeout: Optional[float] = None):
    """Deletes items and then updates priorities, in one table.

    Keys that are not in the table are ignored.
    """
    req = _pb.MutatePrioritiesRequest(
        table=table,
        updates=[schema_pb2.KeyWithPriority(key=int(k), priority=float(p))
                 for k, p in (updates or {}).items()],
        delete_keys=[int(k) for k in (deletes or [])])
    self._unary(self._stub.MutatePriorities, req, timeout,
                f'mutate_priorities of table {table!r}')

  def reset(self, table: str, *, timeout: Optional[float] = None):
    """Removes every item of the table and resets its rate limiter."""
    self._unary(self._stub.Reset, _pb.ResetRequest(table=table), timeout,
                f'reset of table {table!r}')

  def checkpoint(self, *, timeout: Optional[float] = None) -> str:
    """Asks the server to write a checkpoint; returns its path."""
    resp = self._unary(self._stub.Checkpoint, _pb.CheckpointRequest(),
                       timeout, 'checkpoint')
    return resp.checkpoint_path

  # --- signatures ----------------------------------------------------------

  def _get_signature(self, table, timeout=None, refresh=True):
    """The (cached) signature nest of a table; raises InvalidArgumentError
    if the server has no such table."""
    with self._lock:
      cache = self._signature_cache
    if table not in cache and refresh:
      self.server_info(timeout)
      with self._lock:
        cache = self._signature_cache
    if table not in cache:
      raise errors.InvalidArgumentError(
          f'Could not find table "{table}". The following tables exist: '
          f'{", ".join(sorted(cache))}.')
    return cache[table]

  # --- writing -------------------------------------------------------------

  def insert(self, data, priorities: Mapping[str, float], *,
             timeout: Optional[float] = None):
    """Inserts one step as an item of every table in ``priorities``.

    The data is stored once, as one chunk with a column per leaf of
    ``data``; every item references its single row (not squeezed, so a
    sample's columns have a leading dimension of 1, as with dm-reverb).
    Returns once the server confirmed every item.
    """
    if not priorities:
      raise errors.InvalidArgumentError(
          'priorities must contain at least one item')
    self._check_open()
    leaves = _tree.flatten(data)
    columns = []
    for i, leaf in enumerate(leaves):
      if leaf is None:
        raise errors.InvalidArgumentError(f'insert: leaf {i} of data is None')
      columns.append(encoding.as_array(leaf)[None])
    chunk_key = new_key()
    chunk = encoding.encode_chunk(chunk_key, (new_key(), 0, 0, False), columns)
    trajectory = schema_pb2.FlatTrajectory(columns=[
        schema_pb2.FlatTrajectory.Column(chunk_slices=[
            schema_pb2.FlatTrajectory.ChunkSlice(
                chunk_key=chunk_key, offset=0, length=1, index=i)
        ]) for i in range(len(columns))
    ])
    items = [
        schema_pb2.PrioritizedItem(
            key=new_key(), table=table, priority=float(p),
            flat_trajectory=trajectory)
        for table, p in priorities.items()
    ]
    request = _pb.InsertStreamRequest(chunks=[chunk], items=items)
    requests = _channel.Requests()
    requests.put(request)
    what = f'insert into {sorted(priorities)}'
    call = self._stub.InsertStream(requests, timeout=timeout,
                                   wait_for_ready=True)
    try:
      confirmed = 0
      # Read every confirmation before half-closing: Reverb 0.14.0 ends the
      # stream when it sees the half-close, dropping unsent confirmations.
      while confirmed < len(items):
        try:
          resp = next(call)
        except StopIteration:
          raise errors.ServerError(
              f'{what}: the server confirmed {confirmed} of {len(items)} '
              'items') from None
        confirmed += len(resp.keys)
      requests.close()
      for _ in call:
        pass
    except grpc.RpcError as e:
      raise self._rpc_error(e, what, timeout) from None
    finally:
      requests.close()
      call.cancel()

  def trajectory_writer(self, num_keep_alive_refs: int, *,
                        validate_items: bool = True,
                        max_in_flight_items: Optional[int] = None,
                        chunk_length: Optional[int] = None,
                        delta_encoded: bool = False):
    """A new :class:`reverie.TrajectoryWriter` (see there).

    Args:
      num_keep_alive_refs: how many of the most recent steps of every column
        items can reference.
      validate_items: check created items against the table's signature
        (one ServerInfo call per table, cached).
      max_in_flight_items: most items created but not yet confirmed;
        create_item blocks when reached. Default 128.
      chunk_length: fixed chunk length in [1, num_keep_alive_refs]; None
        tunes it per column from the lengths of recent items.
      delta_encoded: delta-encode integer columns before compression.
    """
    from reverie import writer as writer_lib  # pylint: disable=g-import-not-at-top
    self._check_open()
    return writer_lib.TrajectoryWriter(
        self, num_keep_alive_refs, validate_items=validate_items,
        max_in_flight_items=max_in_flight_items, chunk_length=chunk_length,
        delta_encoded=delta_encoded)

  # --- reading -------------------------------------------------------------

  def sample(self, table: str, num_samples: int = 1, *,
             emit_timesteps: bool = True,
             unpack_as_table_signature: bool = False,
             timeout: Optional[float] = None):
    """A generator of ``num_samples`` samples of ``table``, as dm-reverb's.

    Samples are requested one per request, with two requests outstanding
    and two decoded samples queued, so up to five samples can be taken
    from the table ahead of the consumer (dm-reverb's takes one or two;
    never more than ``num_samples`` in all). Closing the generator early
    drops them: on a Queue table they are gone from the table.

    Args:
      table: the table.
      num_samples: how many samples the generator yields.
      emit_timesteps: yield each sample as a list of one ReplaySample per
        step (all columns must have the same length); else one ReplaySample
        of whole columns.
      unpack_as_table_signature: structure ``data`` like the table's
        signature (flat list of columns if it has none).
      timeout: seconds to wait for each sample. The server is asked to give
        up after ``timeout`` (RateLimiterTimeoutError); if no answer comes
        within ``timeout`` + 1 s (server unreachable) the generator raises
        ServerUnavailableError or DeadlineExceededError. None waits forever.

    Yields:
      Lists of ReplaySample (emit_timesteps) or ReplaySamples.
    """
    self._check_open()
    structure = None
    if unpack_as_table_signature:
      structure = self._get_signature(table, timeout=timeout)
    unflatten = sampler_lib.unflattener(structure)
    rl_timeout = -1 if timeout is None else timeout * 1000
    wait = None if timeout is None else timeout + 1.0
    smp = sampler_lib.Sampler(
        self, table, max_samples=num_samples, num_workers=1,
        max_in_flight_samples_per_worker=1,
        rate_limiter_timeout_ms=rl_timeout)
    try:
      for _ in range(num_samples):
        try:
          info, columns = smp.next(timeout=wait)
        except StopIteration:
          return
        if emit_timesteps:
          yield sampler_lib.timesteps(info, columns, unflatten)
        else:
          yield sampler_lib.ReplaySample(info, unflatten(columns))
    finally:
      smp.close()

  def sampler(self, table: str, **kwargs) -> sampler_lib.Sampler:
    """A :class:`reverie.Sampler` of ``table`` (keyword arguments as
    there). Iterating it gives ``(SampleInfo, [column arrays])``."""
    self._check_open()
    return sampler_lib.Sampler(self, table, **kwargs)

  def dataset(self, table: str, batch_size: int, **kwargs):
    """A :class:`reverie.Dataset` of batches of ``table`` (see there)."""
    from reverie import dataset as dataset_lib  # pylint: disable=g-import-not-at-top
    self._check_open()
    return dataset_lib.Dataset(self, table, batch_size, **kwargs)

