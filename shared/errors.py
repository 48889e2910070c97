"""Errors both services raise; each maps to one canonical gRPC status.

The hierarchy::

    LedgerError                      base; never raised itself
    ├── RecordValidationError        INVALID_ARGUMENT  (names record index and field)
    ├── InvalidArgumentError         INVALID_ARGUMENT  (a request field, named)
    │   └── FileNameError            INVALID_ARGUMENT  (a name that is not the docs/spec.md §2.9 shape)
    ├── PermissionDeniedError        PERMISSION_DENIED (a request field the caller may not set, named)
    ├── SessionNotFoundError         NOT_FOUND         (also a session of another tenant)
    │   └── RoundNotFoundError       NOT_FOUND         (no such round in the session)
    ├── ArtifactNotFoundError        NOT_FOUND         (no memory artifact of that id in the
    │                                                   caller's tenant; also another tenant's)
    ├── SessionExistsError           ALREADY_EXISTS
    ├── SessionStateError            FAILED_PRECONDITION (stopped session, seq mismatch)
    ├── SessionBusyError             ABORTED           (a Stop or Resume in progress; retry)
    ├── CorruptSessionError          DATA_LOSS         (names the file and byte offset)
    ├── SessionUnavailableError      UNAVAILABLE       (the session's file awaits a repair that
    │                                                   failed; retried; ErrorInfo names errno)
    ├── NotOwnerError                UNAVAILABLE       (this writer does not own the session's
    │                                                   shard, or stopped owning it before a
    │                                                   write was acknowledged; ErrorInfo NOT_OWNER)
    ├── SessionNotVisibleError       UNAVAILABLE       (a reader of a cluster does not see the file
    │                                                   of a session its owner holds, or could ask
    │                                                   no owner; retry; ErrorInfo says which)
    ├── ResourceLimitError           RESOURCE_EXHAUSTED
    │   ├── QueueFullError           RESOURCE_EXHAUSTED (a session's queue; retry with backoff)
    │   └── ReplyTooLargeError       RESOURCE_EXHAUSTED (use the streaming RPC)
    ├── StorageWriteError            UNAVAILABLE, or RESOURCE_EXHAUSTED when the disk is full
    │                                (write or fsync failed; nothing kept; ErrorInfo names errno
    │                                 and operation)
    ├── SessionFileChangedError      ABORTED           (a watched file was replaced or cut;
    │                                                   ErrorInfo names which)
    ├── WatchClosedError             UNAVAILABLE       (the reader stops serving watches; watch
    │                                                   again)
    └── SearchUnavailableError       UNAVAILABLE       (the reader's content index is off or cannot
                                                        be read; the message says which)

Every class is in :data:`LEDGER_ERROR_CLASSES` (and :data:`AnyLedgerError`): the status
mapping (:func:`serving.status.rpc_statuses`, one decorator on every RPC of both services)
decides for each of them, with nothing left to a catch-all; nothing else chooses a status
code.
"""

from __future__ import annotations

import errno
from typing import Final, TypeAlias

#: Characters of client input an error message quotes (:func:`clip`).
QUOTE_CHARS = 100


def clip(value: object, limit: int = QUOTE_CHARS) -> str:
    """``value`` as text of at most ``limit`` characters, for echoing client input in errors;
    longer text is cut and says so: ``abc… (clipped to 100 of 20000 characters)``."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + f"… (clipped to {limit} of {len(text)} characters)"


class LedgerError(Exception):
    """Base class of every error the ledger raises on purpose."""


class RecordValidationError(LedgerError):
    """A record of an Append request is invalid; the whole request is refused.

    ``index`` is the position of the record in the request (0-based) and
    ``field`` the dotted path of the offending field, e.g. ``message.tool_call_id``.
    """

    def __init__(self, index: int, field: str, description: str) -> None:
        super().__init__(f"record {index}: {field}: {description}")
        self.index = index
        self.field = field
        self.description = description


class InvalidArgumentError(LedgerError):
    """A request field (named by ``field``) has a value the ledger cannot take."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


class FileNameError(InvalidArgumentError):
    """A session file name, session id or agent name is not of the docs/spec.md §2.9 shape."""


class PermissionDeniedError(LedgerError):
    """The caller's credentials do not allow a request field (named by ``field``) as given:
    source times from a caller that is not an importer, another tenant's name (serving.tenancy)."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


class SessionNotFoundError(LedgerError):
    """No session with this id exists under the data root (``deleted``: it was deleted while a
    call followed it: docs/deletion.md §1.3)."""

    def __init__(self, session_id: str, deleted: bool = False) -> None:
        if deleted:
            super().__init__(f"session {clip(session_id)!r} was deleted")
        else:
            super().__init__(f"session {clip(session_id)!r} not found")
        self.session_id = session_id


class RoundNotFoundError(SessionNotFoundError):
    """No round with this id in the session (shared.rounds; NOT_FOUND, as an unknown session)."""

    def __init__(self, session_id: str, round_id: str) -> None:
        super().__init__(session_id)
        self.round_id = round_id
        where = f"in session {clip(session_id)!r}" if session_id else "in any session the caller sees"
        self.args = (f"round {clip(round_id)!r} not found {where}",)


class ArtifactNotFoundError(LedgerError):
    """No memory artifact with this id in the caller's tenant's store (docs/memory.md §6): an
    artifact of another tenant is answered exactly so, never hinted at."""

    def __init__(self, artifact_id: str) -> None:
        super().__init__(f"memory artifact {clip(artifact_id)!r} not found")
        self.artifact_id = artifact_id


class SessionExistsError(LedgerError):
    """CreateSession was given an id that is already in the ledger, or ``deleted`` from it (a
    deleted session's id is never used again: writer_service.deletion)."""

    def __init__(self, session_id: str, deleted: bool = False) -> None:
        if deleted:
            super().__init__(f"session {clip(session_id)!r} was deleted; a session id is never used again")
        else:
            super().__init__(f"session {clip(session_id)!r} already exists")
        self.session_id = session_id


class SessionStateError(LedgerError):
    """The session is not in a state that allows the call (stopped, seq mismatch).

    ``subject`` and ``precondition`` feed a google.rpc.PreconditionFailure detail; those a
    client reads are built by shared.reasons (``session_subject``, ``SESSION_IS_OPEN``, ...).
    """

    def __init__(self, message: str, *, subject: str, precondition: str) -> None:
        super().__init__(message)
        self.subject = subject
        self.precondition = precondition


class SessionBusyError(LedgerError):
    """A Stop or Resume of the session is in progress; the call may be retried when it ends."""


class CorruptSessionError(LedgerError):
    """A session file cannot be used as asked; the message names the file and offset."""


class SessionUnavailableError(LedgerError):
    """One session cannot be served until its file is repaired (its torn tail could not be
    set aside, or the file cannot be read); every other session serves. The repair is retried.

    ``errno_name`` is e.g. ``ENOSPC`` / ``EACCES`` / ``ELOOP`` ("" when not an OS error).
    """

    def __init__(self, message: str, *, errno_name: str = "") -> None:
        super().__init__(message)
        self.errno_name = errno_name


class NotOwnerError(LedgerError):
    """This writer may not write or acknowledge for the session's shard (docs/spec.md §7): it does not own
    the shard, or its ownership ended before a write it made was durable in time. Nothing of the
    request was acknowledged; the bytes of a write already made stay unacknowledged in the file (a
    retry with the same request id is answered from it). Retry.

    ``shard`` is the shard; ``epoch`` the epoch this writer wrote under (None when it never owned it);
    ``owner`` the (address, epoch) of the shard's owner as this writer knows it (None: unknown), where
    a client sends the request again (writer_service.ownership ``owner_of``).
    Sent as UNAVAILABLE with an ``ErrorInfo`` of reason ``NOT_OWNER`` (shared.reasons).
    """

    def __init__(
        self, message: str, *, shard: int, epoch: int | None = None, owner: tuple[str, int] | None = None
    ) -> None:
        super().__init__(message)
        self.shard = shard
        self.epoch = epoch
        self.owner = owner


class SessionNotVisibleError(LedgerError):
    """A reader of a cluster does not see a session's file, which its shard's owner holds
    (``confirmed``: a new file another host's directory cache does not show yet), or no owner
    could be asked (not ``confirmed``): either way NOT_FOUND would be a guess (docs/cluster.md §5).
    Retry: the file shows once this host's view of the folder catches up.

    ``shard`` is the session's shard; ``owner`` the ``host:port`` asked last ("" when none).
    Sent as UNAVAILABLE with an ``ErrorInfo`` of reason ``SESSION_NOT_VISIBLE`` or
    ``OWNER_UNREACHED`` (shared.reasons).
    """

    def __init__(self, message: str, *, shard: int, owner: str, confirmed: bool) -> None:
        super().__init__(message)
        self.shard = shard
        self.owner = owner
        self.confirmed = confirmed


class ResourceLimitError(LedgerError):
    """A configured limit was reached; the message says which and what to do."""


class QueueFullError(ResourceLimitError):
    """The writer's queue for a session holds too many records; retry with backoff."""


class ReplyTooLargeError(ResourceLimitError):
    """A unary reply would exceed the message size limit; use the streaming RPC. Sent as
    RESOURCE_EXHAUSTED with an ``ErrorInfo`` of reason ``REPLY_TOO_LARGE`` (shared.reasons), which clients
    read as "not retryable" (the same request meets it every time)."""


class StorageWriteError(LedgerError):
    """A write or fsync failed; the batch was cut back and nothing of it was kept.

    ``errno_name`` is e.g. ``ENOSPC`` / ``EIO`` / ``EROFS`` ("" when not an OS
    error) and ``operation`` is ``pwritev2`` (one durable write call), ``write``
    or ``fsync``.
    """

    def __init__(self, message: str, *, errno_name: str = "", operation: str = "") -> None:
        super().__init__(message)
        self.errno_name = errno_name
        self.operation = operation

    @property
    def disk_full(self) -> bool:
        return self.errno_name in ("ENOSPC", "EDQUOT")


class SessionFileChangedError(LedgerError):
    """A watched session file was replaced or cut below what was read; the watch cannot go on.
    ``reason`` names which: shared.reasons ``SESSION_FILE_REPLACED`` or ``SESSION_FILE_TRUNCATED``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class WatchClosedError(LedgerError):
    """The reader stops serving watches (it is shutting down); the message says to watch again."""

    def __init__(self, why: str) -> None:
        super().__init__(f"{why}; watch again (from the last seq received + 1)")


class SearchUnavailableError(LedgerError):
    """The reader cannot search: it runs without a content index, or the index cannot be read
    (reader_service.search_index); the message says which and what to do."""


def storage_error(exc: OSError, operation: str, what: str) -> StorageWriteError:
    """A StorageWriteError naming the errno and operation (``read``, ``write``, ``fsync``, ...) of a failed
    file operation; ``what`` says what was being done ('creating session file X')."""
    name = errno.errorcode.get(exc.errno or 0, "")
    return StorageWriteError(
        f"{what} failed ({operation} failed: {exc.strerror or exc}); nothing was kept; retry once storage recovers",
        errno_name=name,
        operation=operation,
    )


#: Every error the ledger raises, each decided by the status mapping (serving.status).
AnyLedgerError: TypeAlias = (
    RecordValidationError
    | InvalidArgumentError
    | FileNameError
    | PermissionDeniedError
    | SessionNotFoundError
    | RoundNotFoundError
    | ArtifactNotFoundError
    | SessionExistsError
    | SessionStateError
    | SessionBusyError
    | CorruptSessionError
    | SessionUnavailableError
    | NotOwnerError
    | SessionNotVisibleError
    | ResourceLimitError
    | QueueFullError
    | ReplyTooLargeError
    | StorageWriteError
    | SessionFileChangedError
    | WatchClosedError
    | SearchUnavailableError
)
#: The classes of :data:`AnyLedgerError`, for ``except`` (a test keeps it every LedgerError subclass).
LEDGER_ERROR_CLASSES: Final = (
    RecordValidationError,
    InvalidArgumentError,
    FileNameError,
    PermissionDeniedError,
    SessionNotFoundError,
    RoundNotFoundError,
    ArtifactNotFoundError,
    SessionExistsError,
    SessionStateError,
    SessionBusyError,
    CorruptSessionError,
    SessionUnavailableError,
    NotOwnerError,
    SessionNotVisibleError,
    ResourceLimitError,
    QueueFullError,
    ReplyTooLargeError,
    StorageWriteError,
    SessionFileChangedError,
    WatchClosedError,
    SearchUnavailableError,
)
