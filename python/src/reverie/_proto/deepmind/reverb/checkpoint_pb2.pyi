from reverie._proto.deepmind.reverb import schema_pb2 as _schema_pb2
from reverie._proto.tensorflow import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RateLimiterCheckpoint(_message.Message):
    __slots__ = ("samples_per_insert", "min_diff", "max_diff", "min_size_to_sample", "sample_count", "insert_count", "delete_count")
    SAMPLES_PER_INSERT_FIELD_NUMBER: _ClassVar[int]
    MIN_DIFF_FIELD_NUMBER: _ClassVar[int]
    MAX_DIFF_FIELD_NUMBER: _ClassVar[int]
    MIN_SIZE_TO_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    INSERT_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELETE_COUNT_FIELD_NUMBER: _ClassVar[int]
    samples_per_insert: float
    min_diff: float
    max_diff: float
    min_size_to_sample: int
    sample_count: int
    insert_count: int
    delete_count: int
    def __init__(self, samples_per_insert: _Optional[float] = ..., min_diff: _Optional[float] = ..., max_diff: _Optional[float] = ..., min_size_to_sample: _Optional[int] = ..., sample_count: _Optional[int] = ..., insert_count: _Optional[int] = ..., delete_count: _Optional[int] = ...) -> None: ...

class PriorityTableCheckpoint(_message.Message):
    __slots__ = ("table_name", "deprecated_items", "rate_limiter", "sampler", "remover", "max_size", "max_times_sampled", "num_deleted_episodes", "signature", "num_unique_samples")
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    DEPRECATED_ITEMS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITER_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_FIELD_NUMBER: _ClassVar[int]
    REMOVER_FIELD_NUMBER: _ClassVar[int]
    MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMES_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    NUM_DELETED_EPISODES_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    NUM_UNIQUE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    table_name: str
    deprecated_items: _containers.RepeatedCompositeFieldContainer[_schema_pb2.PrioritizedItem]
    rate_limiter: RateLimiterCheckpoint
    sampler: _schema_pb2.KeyDistributionOptions
    remover: _schema_pb2.KeyDistributionOptions
    max_size: int
    max_times_sampled: int
    num_deleted_episodes: int
    signature: _struct_pb2.StructuredValue
    num_unique_samples: int
    def __init__(self, table_name: _Optional[str] = ..., deprecated_items: _Optional[_Iterable[_Union[_schema_pb2.PrioritizedItem, _Mapping]]] = ..., rate_limiter: _Optional[_Union[RateLimiterCheckpoint, _Mapping]] = ..., sampler: _Optional[_Union[_schema_pb2.KeyDistributionOptions, _Mapping]] = ..., remover: _Optional[_Union[_schema_pb2.KeyDistributionOptions, _Mapping]] = ..., max_size: _Optional[int] = ..., max_times_sampled: _Optional[int] = ..., num_deleted_episodes: _Optional[int] = ..., signature: _Optional[_Union[_struct_pb2.StructuredValue, _Mapping]] = ..., num_unique_samples: _Optional[int] = ...) -> None: ...
