"""Exceptions raised by reverie's client.

Every failure of a call to the server is a :class:`ReverieError` carrying the
gRPC status code (``code``, a ``grpc.StatusCode`` or None for failures
detected by the client) and the server's own message (``details``). The
subclasses also derive from the built-in exception a Python programmer would
reach for, so existing ``except ValueError`` or ``except TimeoutError``
clauses keep working:

==========================  ====================  ===========================
exception                   also a                raised for
==========================  ====================  ===========================
TableNotFoundError          LookupError           NOT_FOUND: no such table
InvalidArgumentError        ValueError            INVALID_ARGUMENT, and bad
                                                  arguments caught locally
DeadlineExceededError       TimeoutError          a call or wait timed out
RateLimiterTimeoutError     (DeadlineExceeded)    the table's rate limiter
                                                  did not admit a sample in
                                                  time
ServerUnavailableError      (DeadlineExceeded),   UNAVAILABLE/CANCELLED, or a
                            ConnectionError       timeout while the server
                                                  could not be reached
FailedPreconditionError                           FAILED_PRECONDITION
ClosedError                                       the client, writer or
                                                  sampler was closed
MalformedSampleError                              a sample that cannot be
                                                  decoded
ServerError                                       any other status
==========================  ====================  ===========================

All of them are also ``RuntimeError``, as every server error of dm-reverb's
client was.
"""

import grpc

# What Reverb-compatible servers put in a DEADLINE_EXCEEDED status when the
# rate limiter timed out.
RATE_LIMITER_TIMEOUT_TEXT = 'Rate Limiter: Timeout exceeded'


class ReverieError(RuntimeError):
  """Base class of reverie's exceptions.

  Attributes:
    code: the gRPC status code (``grpc.StatusCode``) the server answered
      with, or None when the client detected the failure itself.
    details: the server's message (or the client's, when ``code`` is None).
  """

  def __init__(self, message, *, code=None, details=None):
    super().__init__(message)
    self.code = code
    self.details = message if details is None else details


class TableNotFoundError(ReverieError, LookupError):
  """The server has no table of that name."""


class InvalidArgumentError(ReverieError, ValueError):
  """The server or the client rejected an argument."""


class DeadlineExceededError(ReverieError, TimeoutError):
  """A call, or a wait such as ``flush(timeout_ms=...)``, timed out."""


class RateLimiterTimeoutError(DeadlineExceededError):
  """The table's rate limiter did not allow a sample within the timeout."""


class ServerUnavailableError(DeadlineExceededError, ConnectionError):
  """The server cannot be reached, or is shutting down.

  Also raised instead of a plain DeadlineExceededError when a call timed out
  while the connection to the server was down; ``details`` then holds gRPC's
  description of the last connection failure.
  """


class FailedPreconditionError(ReverieError):
  """The request needs state the server lacks (e.g. no checkpointer)."""


class UnauthenticatedError(ReverieError, PermissionError):
  """The server wants a bearer token (``Client(token=...)``) and got none,
  or one it does not accept."""


class ClosedError(ReverieError):
  """The client, writer, sampler or dataset iterator was closed."""


class MalformedSampleError(ReverieError):
  """A sample whose chunks or trajectory cannot be decoded."""


class ServerError(ReverieError):
  """Any other failure reported by the server (INTERNAL, UNKNOWN, ...)."""


def _code_name(code):
  return getattr(code, 'name', str(code))


def from_status(code, details, what=''):
  """The exception for a gRPC status ``code`` with message ``details``.

  ``what`` names the operation (for example "sample from table 'x'"); the
  exception's message is "WHAT: DETAILS [CODE]".
  """
  details = details or ''
  message = f'{what}: {details}' if what else details
  message = f'{message} [{_code_name(code)}]'
  if code == grpc.StatusCode.NOT_FOUND:
    cls = TableNotFoundError
  elif code == grpc.StatusCode.INVALID_ARGUMENT:
    cls = InvalidArgumentError
  elif code == grpc.StatusCode.FAILED_PRECONDITION:
    cls = FailedPreconditionError
  elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
    if RATE_LIMITER_TIMEOUT_TEXT in details:
      cls = RateLimiterTimeoutError
    else:
      cls = DeadlineExceededError
  elif code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
    cls = ServerUnavailableError
  elif code == grpc.StatusCode.UNAUTHENTICATED:
    cls = UnauthenticatedError
  else:
    cls = ServerError
  return cls(message, code=code, details=details)


def from_rpc_error(err, what=''):
  """Converts a ``grpc.RpcError`` (or anything with code()/details())."""
  try:
    code, details = err.code(), err.details()
  except Exception:  # pylint: disable=broad-except
    return ServerError(f'{what}: {err}' if what else str(err))
  return from_status(code, details, what)


def is_transient(err):
  """Whether a stream that failed with ``err`` should be reopened."""
  return (isinstance(err, ServerUnavailableError) and
          err.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED))
