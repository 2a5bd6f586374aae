"""Type stubs of the native module (re-exported by `rollcall`)."""

from __future__ import annotations

import os
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    ClassVar,
    Dict,
    FrozenSet,
    Iterable,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from ._errors import RollcallError

__version__: str

PartitionLike = Union["TopicPartition", Tuple[str, int]]
Offsets = Union[
    Mapping["TopicPartition", int],
    Mapping[Tuple[str, int], int],
    Mapping[PartitionLike, int],
    Iterable["Offset"],
]
Topics = Union[Mapping[str, int], Iterable[Tuple[str, int]]]
Addresses = Union[str, Sequence[str]]
LostReason = Literal[
    "expelled", "fenced", "lease_expired", "membership_gone", "reassigned", "left"
]
ExpelReason = Literal[
    "session_expired", "progress_expired", "rebalance_timeout", "fenced", "left"
]

class TopicPartition:
    """One partition of one topic; hashable and ordered."""

    __match_args__: ClassVar[Tuple[str, str]]
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    def __init__(self, topic: str, partition: int) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    def __lt__(self, other: TopicPartition) -> bool: ...
    def __le__(self, other: TopicPartition) -> bool: ...
    def __gt__(self, other: TopicPartition) -> bool: ...
    def __ge__(self, other: TopicPartition) -> bool: ...

class Offset:
    """An offset to commit, with free-form metadata."""

    @property
    def partition(self) -> TopicPartition: ...
    @property
    def offset(self) -> int: ...
    @property
    def metadata(self) -> str: ...
    def __init__(self, partition: PartitionLike, offset: int, metadata: str = "") -> None: ...

class Committed:
    """An offset as committed, with its metadata."""

    @property
    def offset(self) -> int: ...
    @property
    def metadata(self) -> str: ...

class Assignment:
    """The partitions a member holds (including those being revoked) and the generation."""

    @property
    def generation(self) -> int: ...
    @property
    def partitions(self) -> FrozenSet[TopicPartition]: ...
    @property
    def revoking(self) -> FrozenSet[TopicPartition]: ...

class Event:
    """Base of the events a member's application acts on, in order."""

class Assigned(Event):
    """The member now owns these partitions in addition to those it had."""

    __match_args__: ClassVar[Tuple[str, str]]
    @property
    def partitions(self) -> FrozenSet[TopicPartition]: ...
    @property
    def generation(self) -> int: ...

class RevokeRequested(Event):
    """Asked back: finish, commit, then `Member.ack_revocation`."""

    __match_args__: ClassVar[Tuple[str, str]]
    @property
    def partitions(self) -> FrozenSet[TopicPartition]: ...
    @property
    def generation(self) -> int: ...

class Lost(Event):
    """No longer the member's: stop working on them at once."""

    __match_args__: ClassVar[Tuple[str, str]]
    @property
    def partitions(self) -> FrozenSet[TopicPartition]: ...
    @property
    def reason(self) -> LostReason: ...
    @property
    def expel_reason(self) -> Optional[ExpelReason]: ...
    @property
    def ends_membership(self) -> bool: ...

class Suspended(Event):
    """Lease ran out or connection dropped: act on nothing until `Resumed`."""

    __match_args__: ClassVar[Tuple[str]]
    @property
    def partitions(self) -> FrozenSet[TopicPartition]: ...

class Resumed(Event):
    """The coordinator answered again: act on these again."""

    __match_args__: ClassVar[Tuple[str]]
    @property
    def partitions(self) -> FrozenSet[TopicPartition]: ...

class Fatal(Event):
    """The member cannot continue; no further events follow."""

    __match_args__: ClassVar[Tuple[str]]
    @property
    def error(self) -> RollcallError: ...

AnyEvent = Union[Assigned, RevokeRequested, Lost, Suspended, Resumed, Fatal]

class TlsConfig:
    """TLS to the coordinator (PEM files)."""

    def __init__(
        self,
        ca: Union[str, os.PathLike[str]],
        *,
        cert: Optional[Union[str, os.PathLike[str]]] = None,
        key: Optional[Union[str, os.PathLike[str]]] = None,
        server_name: Optional[str] = None,
    ) -> None: ...

class Events:
    """A member's events: a blocking iterator and an asynchronous one."""

    def __iter__(self) -> Iterator[AnyEvent]: ...
    def __next__(self) -> AnyEvent: ...
    def __aiter__(self) -> AsyncIterator[AnyEvent]: ...
    def __anext__(self) -> Awaitable[AnyEvent]: ...

class Member:
    """One membership in one group."""

    @property
    def finished(self) -> bool: ...
    @property
    def is_suspended(self) -> bool: ...
    @property
    def member_id(self) -> Optional[str]: ...
    @property
    def group(self) -> str: ...
    def events(self) -> Events: ...
    def next_event(self, timeout: Optional[float] = None) -> Optional[AnyEvent]: ...
    def next_event_async(self) -> Awaitable[Optional[AnyEvent]]: ...
    def mark_progress(self) -> None: ...
    def ack_revocation(self, partitions: Iterable[PartitionLike]) -> None: ...
    def commit(self, offsets: Offsets, *, timeout: Optional[float] = None) -> None: ...
    def commit_async(self, offsets: Offsets) -> Awaitable[None]: ...
    def committed(
        self, topics: Optional[Union[str, Iterable[str]]] = None, *, timeout: Optional[float] = None
    ) -> Dict[TopicPartition, Committed]: ...
    def committed_async(
        self, topics: Optional[Union[str, Iterable[str]]] = None
    ) -> Awaitable[Dict[TopicPartition, Committed]]: ...
    def report_load(self, partition: PartitionLike, load: float) -> None: ...
    def report_loads(
        self, loads: Union[Mapping[TopicPartition, float], Mapping[Tuple[str, int], float]]
    ) -> None: ...
    def drain(self, *, timeout: Optional[float] = None) -> None: ...
    def undrain(self, *, timeout: Optional[float] = None) -> None: ...
    def drain_async(self) -> Awaitable[None]: ...
    def undrain_async(self) -> Awaitable[None]: ...
    def lease_deadline(self) -> Optional[float]: ...
    def assignment(self) -> Assignment: ...
    def leave(
        self, timeout: float = 5.0, *, on_event: Optional[Callable[[AnyEvent], Any]] = None
    ) -> None: ...
    def leave_async(self, timeout: float = 5.0) -> Awaitable[None]: ...

class Client:
    """A connection to the coordinator, shared by any number of members."""

    @staticmethod
    def connect(
        addresses: Addresses,
        *,
        tls: Optional[TlsConfig] = None,
        username: Optional[str] = None,
        password: Optional[str] = None,
        connect_timeout: float = 5.0,
        client_software: Optional[str] = None,
    ) -> Client: ...
    @staticmethod
    def connect_async(
        addresses: Addresses,
        *,
        tls: Optional[TlsConfig] = None,
        username: Optional[str] = None,
        password: Optional[str] = None,
        connect_timeout: float = 5.0,
        client_software: Optional[str] = None,
    ) -> Awaitable[Client]: ...
    def join(
        self,
        group: str,
        topics: Topics,
        *,
        instance_id: Optional[str] = None,
        client_id: Optional[str] = None,
        session_timeout: Optional[float] = None,
        heartbeat_interval: Optional[float] = None,
        progress_timeout: Optional[float] = None,
        rebalance_timeout: Optional[float] = None,
        lease_timeout: Optional[float] = None,
        lease_margin: Optional[float] = None,
        detector: Optional[str] = None,
        label: Optional[str] = None,
        rack: Optional[str] = None,
        capacity: Optional[int] = None,
        topic_racks: Optional[Mapping[str, Sequence[Optional[str]]]] = None,
        timeout: Optional[float] = None,
    ) -> Member: ...
    def join_async(
        self,
        group: str,
        topics: Topics,
        *,
        instance_id: Optional[str] = None,
        client_id: Optional[str] = None,
        session_timeout: Optional[float] = None,
        heartbeat_interval: Optional[float] = None,
        progress_timeout: Optional[float] = None,
        rebalance_timeout: Optional[float] = None,
        lease_timeout: Optional[float] = None,
        lease_margin: Optional[float] = None,
        detector: Optional[str] = None,
        label: Optional[str] = None,
        rack: Optional[str] = None,
        capacity: Optional[int] = None,
        topic_racks: Optional[Mapping[str, Sequence[Optional[str]]]] = None,
    ) -> Awaitable[Member]: ...
    def drain(
        self,
        group: str,
        member_id: Optional[str] = None,
        *,
        label: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> List[str]: ...
    def undrain(
        self,
        group: str,
        member_id: Optional[str] = None,
        *,
        label: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> List[str]: ...
    def fetch_offsets(
        self, group: str, topics: Optional[Union[str, Iterable[str]]] = None
    ) -> Dict[TopicPartition, Committed]: ...
    def fetch_offsets_async(
        self, group: str, topics: Optional[Union[str, Iterable[str]]] = None
    ) -> Awaitable[Dict[TopicPartition, Committed]]: ...
