"""rollout_client: how agents use the rollout ledger from Python.

Sessions as objects over the writer and reader services; messages in and out as
plain dicts in the ledger's chat shape (never protobuf); appends exactly once
without the caller's help; delegation coordinates carried by context; typed
errors with the google.rpc details; a :class:`ConversationMemory` whose list is
reached only through methods; and (``rollout_client.agents``, with the
``agents`` extra) an OpenAI Agents SDK session over the ledger::

    from rollout_client import RolloutClient, delegation, user, assistant, tool_call

    with RolloutClient("127.0.0.1:50051", "127.0.0.1:50052") as client:
        parent = client.create_session("director", root=True)
        parent.append(user("fix the bug"), assistant(tool_calls=[tool_call("call_1", "coder")]))
        with delegation(parent=parent, tool_call_id="call_1"):
            child = client.create_session("coder")   # records parent and delegation id
        child.append(user("fix the bug"))
        child.stop("completed")

:class:`RolloutClient` blocks; :class:`AsyncRolloutClient` has the same calls as
coroutines. docs/spec.md §6 (Interfaces) names this package; the README has a walkthrough.
"""

from rollout_client._aio import AsyncRolloutClient
from rollout_client._appends import RetryPolicy
from rollout_client._carried import carried_agents_item
from rollout_client._channels import CHANNEL_OPTIONS, blocking_channel
from rollout_client._delegation import DelegationScope, current_delegation, delegation
from rollout_client._errors import (
    AbortedError,
    AlreadyExistsError,
    AppendOutcomeUnknownError,
    ClientClosedError,
    DataLossError,
    DeadlineExceededError,
    ErrorInfo,
    FailedPreconditionError,
    FieldViolation,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionViolation,
    ResourceExhaustedError,
    RolloutError,
    RootNotDeclaredError,
    SessionStoppedError,
    UnauthenticatedError,
    UnavailableError,
)
from rollout_client._memory import ConversationMemory
from rollout_client._records import (
    Compaction,
    EncodedMessage,
    Event,
    MessageRef,
    Record,
    Retraction,
    TurnContext,
    assistant,
    developer,
    system,
    title,
    tool_call,
    tool_result,
    user,
)
from rollout_client._results import (
    AppendResult,
    Checkpoint,
    DegradedEntry,
    Delegation,
    DeleteResult,
    ForkOrigin,
    Memories,
    PendingRound,
    RecentMessages,
    Replay,
    ReplaySummary,
    ResumeResult,
    RoundRecords,
    SearchMatch,
    SearchPage,
    SessionHit,
    SessionPage,
    SessionSummary,
    StopFacts,
    StopResult,
    TooLarge,
    VerifyReport,
    WatchedRecord,
)
from rollout_client._session import AsyncReplayStream, AsyncSession
from rollout_client._settings import DEFAULT_READER, DEFAULT_WRITER, ClientSettings, client_settings
from rollout_client._sync import ReplayStream, RolloutClient, Session
from shared.memory import MemoryView, ResolvedMessage, ResolvedProvenance, Scope
from shared.rounds import Round

__all__ = [
    "CHANNEL_OPTIONS",
    "DEFAULT_READER",
    "DEFAULT_WRITER",
    "AbortedError",
    "AlreadyExistsError",
    "AppendOutcomeUnknownError",
    "AppendResult",
    "AsyncReplayStream",
    "AsyncRolloutClient",
    "AsyncSession",
    "Checkpoint",
    "ClientClosedError",
    "ClientSettings",
    "Compaction",
    "ConversationMemory",
    "DataLossError",
    "DeadlineExceededError",
    "DegradedEntry",
    "Delegation",
    "DelegationScope",
    "DeleteResult",
    "EncodedMessage",
    "ErrorInfo",
    "Event",
    "FailedPreconditionError",
    "FieldViolation",
    "ForkOrigin",
    "InternalError",
    "InvalidArgumentError",
    "Memories",
    "MemoryView",
    "MessageRef",
    "NotFoundError",
    "PendingRound",
    "PermissionDeniedError",
    "PreconditionViolation",
    "RecentMessages",
    "Record",
    "Replay",
    "ReplayStream",
    "ReplaySummary",
    "ResolvedMessage",
    "ResolvedProvenance",
    "ResourceExhaustedError",
    "ResumeResult",
    "Retraction",
    "RetryPolicy",
    "RolloutClient",
    "RolloutError",
    "RootNotDeclaredError",
    "Round",
    "RoundRecords",
    "Scope",
    "SearchMatch",
    "SearchPage",
    "Session",
    "SessionHit",
    "SessionPage",
    "SessionStoppedError",
    "SessionSummary",
    "StopFacts",
    "StopResult",
    "TooLarge",
    "TurnContext",
    "UnauthenticatedError",
    "UnavailableError",
    "VerifyReport",
    "WatchedRecord",
    "assistant",
    "blocking_channel",
    "carried_agents_item",
    "client_settings",
    "current_delegation",
    "delegation",
    "developer",
    "system",
    "title",
    "tool_call",
    "tool_result",
    "user",
]
