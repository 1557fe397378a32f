from reverie._proto.deepmind.reverb import checkpoint_pb2 as _checkpoint_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReverbServerConfig(_message.Message):
    __slots__ = ("tables", "port")
    TABLES_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    tables: _containers.RepeatedCompositeFieldContainer[_checkpoint_pb2.PriorityTableCheckpoint]
    port: int
    def __init__(self, tables: _Optional[_Iterable[_Union[_checkpoint_pb2.PriorityTableCheckpoint, _Mapping]]] = ..., port: _Optional[int] = ...) -> None: ...
