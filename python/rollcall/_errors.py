"""The exceptions of the rollcall package.

`RollcallError` is the base of all of them. Each error code of the rollcall protocol has
a class of its own, named after it (`not_owner` is `NotOwnerError`) and carrying it as
`code`; the others say what happened before or beside the protocol.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Type


class RollcallError(Exception):
    """Base of every rollcall exception. `code` is the protocol's error name, if any."""

    code: Optional[str] = None


class ConfigError(RollcallError, ValueError):
    """An argument the client refuses before contacting the coordinator."""


class ConnectError(RollcallError, ConnectionError):
    """No connection to any of the coordinator addresses could be made."""


class ConnectTimeoutError(ConnectError, TimeoutError):
    """The connection or its handshake did not complete within the connect timeout."""


class TlsError(ConnectError):
    """TLS failed: a certificate or key file, or the peer's certificate, was refused."""


class ClosedError(RollcallError):
    """The member or its client is closed."""


class UnavailableError(RollcallError):
    """The coordinator is unreachable right now; the request may be retried."""


class LeaseExpiredError(RollcallError):
    """The member's lease expired; its partitions were reported lost."""


class NotMemberError(RollcallError):
    """The member is not (or no longer) in its group."""


class LeaveUnconfirmedError(RollcallError):
    """The coordinator did not confirm the leave; the session will expire instead."""


class OperationTimeoutError(RollcallError, TimeoutError):
    """A blocking call's `timeout` passed."""


class CommitRefusedError(RollcallError):
    """Some partitions of a commit were refused, each for its own reason: `refused`
    lists `(TopicPartition, code)`. Partitions not listed were stored."""

    refused: List[Tuple[Any, str]]


class UnsupportedVersionError(RollcallError):
    """unsupported_version: the coordinator supports no version of an API the client needs."""

    code = "unsupported_version"


class UnknownApiError(RollcallError):
    """unknown_api."""

    code = "unknown_api"


class HandshakeRequiredError(RollcallError):
    """handshake_required."""

    code = "handshake_required"


class MalformedFrameError(RollcallError):
    """malformed_frame."""

    code = "malformed_frame"


class FrameTooLargeError(RollcallError):
    """frame_too_large."""

    code = "frame_too_large"


class UnknownGroupError(RollcallError):
    """unknown_group: the coordinator does not know the group."""

    code = "unknown_group"


class UnknownMemberError(RollcallError):
    """unknown_member: the coordinator does not know the member."""

    code = "unknown_member"


class MemberExpelledError(RollcallError):
    """member_expelled: the member was expelled from its group."""

    code = "member_expelled"


class FencedInstanceError(RollcallError):
    """fenced_instance: another process joined with the same instance id; stop."""

    code = "fenced_instance"


class IllegalGenerationError(RollcallError):
    """illegal_generation."""

    code = "illegal_generation"


class NotOwnerError(RollcallError):
    """not_owner: a commit for partitions the member does not own (`partitions`)."""

    code = "not_owner"
    partitions: List[Any]


class PartitionRevokedError(RollcallError):
    """partition_revoked: a commit for partitions already released (`partitions`)."""

    code = "partition_revoked"
    partitions: List[Any]


class InconsistentSubscriptionError(RollcallError):
    """inconsistent_subscription: a topic's partition count differs from the group's."""

    code = "inconsistent_subscription"


class GroupFullError(RollcallError):
    """group_full."""

    code = "group_full"


class InvalidSessionTimeoutError(RollcallError):
    """invalid_session_timeout: outside the coordinator's bounds."""

    code = "invalid_session_timeout"


class InvalidRequestError(RollcallError):
    """invalid_request."""

    code = "invalid_request"


class TooManyPartitionsError(RollcallError):
    """too_many_partitions."""

    code = "too_many_partitions"


class MetadataTooLargeError(RollcallError):
    """metadata_too_large: commit metadata over the limit (`partitions`)."""

    code = "metadata_too_large"
    partitions: List[Any]


class CoordinatorShuttingDownError(RollcallError):
    """coordinator_shutting_down."""

    code = "coordinator_shutting_down"


class StorageFailureError(RollcallError):
    """storage_failure."""

    code = "storage_failure"


class TooManyConnectionsError(RollcallError):
    """too_many_connections."""

    code = "too_many_connections"


class InconsistentMemberError(RollcallError):
    """inconsistent_member."""

    code = "inconsistent_member"


class InternalError(RollcallError):
    """internal: an internal error of the coordinator."""

    code = "internal"


class AuthenticationRequiredError(RollcallError):
    """authentication_required."""

    code = "authentication_required"


class AuthenticationFailedError(RollcallError):
    """authentication_failed: wrong user or password, or a coordinator that cannot
    prove it holds the user's credential."""

    code = "authentication_failed"


class NotAuthorizedError(RollcallError):
    """not_authorized: the principal may not do this to this group."""

    code = "not_authorized"


class TooManyGroupsError(RollcallError):
    """too_many_groups."""

    code = "too_many_groups"


class TooManyOffsetsError(RollcallError):
    """too_many_offsets."""

    code = "too_many_offsets"


class TooManyMembersError(RollcallError):
    """too_many_members."""

    code = "too_many_members"


class NotCoordinatorError(RollcallError):
    """not_coordinator."""

    code = "not_coordinator"


class CoordinatorLoadingError(RollcallError):
    """coordinator_loading."""

    code = "coordinator_loading"


_BY_CODE: Dict[str, Type[RollcallError]] = {
    str(cls.code): cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, RollcallError) and cls.__dict__.get("code")
}


def class_of_code(code: str) -> Type[RollcallError]:
    """The exception class of a protocol error name (`RollcallError` if unknown)."""
    return _BY_CODE.get(code, RollcallError)
