"""Workers in Python for the rollcall consumer-group coordinator.

A thin layer over the Rust client: `connect` to a coordinator, `join` a group, and act
on the member's events. Heartbeats, leases, reconnections and revocation
acknowledgements run in the native client, on its own thread, so a Python computation
that holds the GIL for seconds does not cost the membership.

Blocking::

    client = rollcall.connect("127.0.0.1:7070")
    member = client.join("billing", {"orders": 12}, session_timeout=3.0)
    for event in member.events():
        if isinstance(event, rollcall.RevokeRequested):
            member.commit({p: positions[p] for p in event.partitions})
            member.ack_revocation(event.partitions)
        ...

asyncio::

    client = await rollcall.connect_async("127.0.0.1:7070")
    member = await client.join_async("billing", {"orders": 12})
    async for event in member.events():
        ...
"""

from __future__ import annotations

from typing import Union

from ._errors import (
    RollcallError,
    ConfigError,
    ConnectError,
    ConnectTimeoutError,
    TlsError,
    ClosedError,
    UnavailableError,
    LeaseExpiredError,
    NotMemberError,
    LeaveUnconfirmedError,
    OperationTimeoutError,
    CommitRefusedError,
    UnsupportedVersionError,
    UnknownApiError,
    HandshakeRequiredError,
    MalformedFrameError,
    FrameTooLargeError,
    UnknownGroupError,
    UnknownMemberError,
    MemberExpelledError,
    FencedInstanceError,
    IllegalGenerationError,
    NotOwnerError,
    PartitionRevokedError,
    InconsistentSubscriptionError,
    GroupFullError,
    InvalidSessionTimeoutError,
    InvalidRequestError,
    TooManyPartitionsError,
    MetadataTooLargeError,
    CoordinatorShuttingDownError,
    StorageFailureError,
    TooManyConnectionsError,
    InconsistentMemberError,
    InternalError,
    AuthenticationRequiredError,
    AuthenticationFailedError,
    NotAuthorizedError,
    TooManyGroupsError,
    TooManyOffsetsError,
    TooManyMembersError,
    NotCoordinatorError,
    CoordinatorLoadingError,
)
from ._rollcall import (
    Assigned,
    Assignment,
    Client,
    Committed,
    Event,
    Events,
    Fatal,
    Lost,
    Member,
    Offset,
    Resumed,
    RevokeRequested,
    Suspended,
    TlsConfig,
    TopicPartition,
    __version__,
)

#: Any of the events, for annotations and exhaustive `match` statements.
AnyEvent = Union[Assigned, RevokeRequested, Lost, Suspended, Resumed, Fatal]

connect = Client.connect
connect_async = Client.connect_async

__all__ = [
    "AnyEvent",
    "Client",
    "Member",
    "Events",
    "TlsConfig",
    "TopicPartition",
    "Offset",
    "Committed",
    "Assignment",
    "Event",
    "Assigned",
    "RevokeRequested",
    "Lost",
    "Suspended",
    "Resumed",
    "Fatal",
    "connect",
    "connect_async",
    "RollcallError",
    "ConfigError",
    "ConnectError",
    "ConnectTimeoutError",
    "TlsError",
    "ClosedError",
    "UnavailableError",
    "LeaseExpiredError",
    "NotMemberError",
    "LeaveUnconfirmedError",
    "OperationTimeoutError",
    "CommitRefusedError",
    "UnsupportedVersionError",
    "UnknownApiError",
    "HandshakeRequiredError",
    "MalformedFrameError",
    "FrameTooLargeError",
    "UnknownGroupError",
    "UnknownMemberError",
    "MemberExpelledError",
    "FencedInstanceError",
    "IllegalGenerationError",
    "NotOwnerError",
    "PartitionRevokedError",
    "InconsistentSubscriptionError",
    "GroupFullError",
    "InvalidSessionTimeoutError",
    "InvalidRequestError",
    "TooManyPartitionsError",
    "MetadataTooLargeError",
    "CoordinatorShuttingDownError",
    "StorageFailureError",
    "TooManyConnectionsError",
    "InconsistentMemberError",
    "InternalError",
    "AuthenticationRequiredError",
    "AuthenticationFailedError",
    "NotAuthorizedError",
    "TooManyGroupsError",
    "TooManyOffsetsError",
    "TooManyMembersError",
    "NotCoordinatorError",
    "CoordinatorLoadingError",
]
