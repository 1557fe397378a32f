"""reverie: a pure-Python client for reverie and Reverb replay servers.

No TensorFlow: numpy arrays in and out, gRPC underneath. The API follows
dm-reverb's Python client, so that porting is mostly an import change::

    import reverie

    client = reverie.Client('localhost:8000')
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
      for step in range(10):
        writer.append({'obs': np.zeros(4, np.float32), 'reward': 1.0})
        if step >= 2:
          writer.create_item('replay', priority=1.0, trajectory={
              'obs': writer.history['obs'][-3:],
              'reward': writer.history['reward'][-1],
          })
    for batch in client.dataset('replay', batch_size=32, max_samples=64):
      ...  # batch.data['obs'].shape == (32, 3, 4)

See python/README.md for the differences from dm-reverb.
"""

from reverie import adders
from reverie import frameworks
from reverie.client import Client
from reverie.client import TableInfo
from reverie.dataset import Dataset
from reverie.dataset import DatasetIterator
from reverie.errors import ClosedError
from reverie.errors import DeadlineExceededError
from reverie.errors import FailedPreconditionError
from reverie.errors import InvalidArgumentError
from reverie.errors import MalformedSampleError
from reverie.errors import RateLimiterTimeoutError
from reverie.errors import ReverieError
from reverie.errors import ServerError
from reverie.errors import ServerUnavailableError
from reverie.errors import TableNotFoundError
from reverie.errors import UnauthenticatedError
from reverie.sampler import ReplaySample
from reverie.sampler import SampleInfo
from reverie.sampler import Sampler
from reverie.specs import BoundedTensorSpec
from reverie.specs import TensorSpec
from reverie.writer import TrajectoryColumn
from reverie.writer import TrajectoryWriter

# dm-reverb's name for the base error.
ReverbError = ReverieError

__all__ = [
    'BoundedTensorSpec', 'Client', 'ClosedError', 'Dataset',
    'DatasetIterator', 'DeadlineExceededError', 'FailedPreconditionError',
    'InvalidArgumentError', 'MalformedSampleError', 'RateLimiterTimeoutError',
    'ReplaySample', 'ReverbError', 'ReverieError', 'SampleInfo', 'Sampler',
    'ServerError', 'ServerUnavailableError', 'TableInfo', 'TableNotFoundError',
    'TensorSpec', 'TrajectoryColumn', 'TrajectoryWriter',
    'UnauthenticatedError', 'adders',
    'frameworks',
]

__version__ = '0.1.0'
