"""Session file names: the writer's builder and the reader's parser, a mirror pair (docs/spec.md §2.9).

Shape: ``<YYYY-MM-DD>_<HHMMSS>_<session_id>[_<agent_name>].jsonl``, e.g.::

    2026-11-30_101530_01a22c15-89a6-7d3d-b5b7-165622bd350c.jsonl
    2026-11-30_101531_01a22c15-89a7-7aaa-8000-0123456789ab_code_reviewer.jsonl

* the date and time are the session's creation time, UTC, to the second;
* ``session_id`` is a lowercase UUID (36 characters; new ones are version 7,
  time-ordered, or version 8 for a session named by a caller's own key:
  :func:`session_id_for_key`), so the agent name after it may itself contain ``_``;
* ``agent_name`` is 1-64 characters of ``[A-Za-z0-9._-]``, not starting with ``.``
  and never containing ``..`` (so never a path), optional.

:func:`build_file_name` and :func:`parse_file_name` are inverses; a property test
pins the round trip. Change both or neither.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import uuid6

from shared.errors import FileNameError
from shared.records import clip

FILE_SUFFIX = ".jsonl"
AGENT_NAME_MAX_CHARS = 64
_SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_AGENT_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
_FILE_NAME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})_(\d{2})(\d{2})(\d{2})_(?P<session_id>[0-9a-f-]{36})"
    r"(?:_(?P<agent_name>[^/]+))?\.jsonl"
)


@dataclass(frozen=True, slots=True)
class SessionFileName:
    """The parts of a session file name; ``created_at`` is UTC, whole seconds."""

    created_at: datetime
    session_id: str
    agent_name: str

    @property
    def sort_key(self) -> tuple[datetime, str]:
        """Listing order key: newest first means descending on this."""
        return (self.created_at, self.session_id)


def new_session_id() -> str:
    """A new lowercase UUIDv7 session id (time-ordered)."""
    return str(uuid6.uuid7())


#: Longest session key (characters): a caller's own name for a session (SessionSpec.session_key).
SESSION_KEY_MAX_CHARS = 512
#: The personalization of the hash of a session key (a version tag, so a later scheme cannot collide).
_KEY_DOMAIN = b"rollout-key-v1\x00\x00"


def session_id_for_key(tenant: str, key: str) -> str:
    """The session id a caller's own key names in ``tenant``: a lowercase UUID (version 8, from a
    BLAKE2b hash of the tenant and the key), the same on every call, in every service and client.

    A key is unique per tenant by construction: the same key in two tenants names two
    sessions, and no lookup table is needed (the writer creates the session under this id,
    readers find it by it). ``tenant`` is the session's recorded tenant (``default`` when
    none was given). Raises FileNameError (field ``session_key``) for an empty key or one
    over :data:`SESSION_KEY_MAX_CHARS` characters.
    """
    if not key or len(key) > SESSION_KEY_MAX_CHARS:
        raise FileNameError("session_key", f"must be 1 to {SESSION_KEY_MAX_CHARS} characters, got {len(key)}")
    return _keyed_uuid(_KEY_DOMAIN, tenant, key, b"")


def _keyed_uuid(domain: bytes, tenant: str, key: str, tail: bytes) -> str:
    """A version 8 UUID from BLAKE2b-128 (personalization ``domain``) of the tenant, a zero
    byte, the key, and ``tail``."""
    digest = hashlib.blake2b(
        tenant.encode("utf-8", "surrogatepass") + b"\x00" + key.encode("utf-8", "surrogatepass") + tail,
        digest_size=16,
        person=domain[:16],
    ).digest()
    raw = bytearray(digest)
    raw[6] = (raw[6] & 0x0F) | 0x80  # version 8
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 9562 variant
    return str(uuid.UUID(bytes=bytes(raw)))


#: The personalization of the hash of a session key's later ids (after its sessions were deleted).
_KEY_AGAIN_DOMAIN = b"rollout-key-next"
#: Most draws for a later id of a key in its first id's shard (then the first draw is taken).
KEY_SHARD_DRAWS = 1 << 20


def keyed_session_ids(tenant: str, key: str, shard_of: Callable[[str], int]) -> Iterator[str]:
    """The ids session key ``key`` names in ``tenant``, in turn (docs/deletion.md §2.2): first
    :func:`session_id_for_key`; once the session of one is deleted, the key names the next.
    Generation ``g`` (1, 2, ...) is the first of the version 8 UUIDs from BLAKE2b-128
    (personalization ``rollout-key-next``) of tenant, zero byte, key, zero byte, ``g`` and
    ``:`` and the draw number (decimal ASCII) whose shard (``shard_of``: the data root's
    :meth:`shared.layout.DataRoot.shard_of`) is the first id's, so that one writer (the
    shard's owner) decides every id of a key. Endless: stop when one is not deleted.
    Raises FileNameError (``session_key``) as :func:`session_id_for_key`."""
    first = session_id_for_key(tenant, key)
    yield first
    shard = shard_of(first)
    generation = 1
    while True:
        draws = (
            _keyed_uuid(_KEY_AGAIN_DOMAIN, tenant, key, f"\x00{generation}:{draw}".encode())
            for draw in range(KEY_SHARD_DRAWS)
        )
        fallback = None
        for candidate in draws:
            fallback = fallback or candidate
            if shard_of(candidate) == shard:
                yield candidate
                break
        else:
            assert fallback is not None
            yield fallback
        generation += 1


def current_keyed_session_id(
    tenant: str, key: str, *, shard_of: Callable[[str], int], deleted: Callable[[str], bool]
) -> str:
    """The id session key ``key`` names in ``tenant`` now: the first of :func:`keyed_session_ids`
    that ``deleted`` does not say was deleted (the writer asks its tombstones, the reader the
    shard's deletion records). The one rule CreateSession, Fork and ResolveSession share for a
    key. Raises FileNameError (``session_key``)."""
    for candidate in keyed_session_ids(tenant, key, shard_of):
        if not deleted(candidate):
            return candidate
    raise AssertionError("keyed_session_ids is endless")  # pragma: no cover


def is_session_id(session_id: str) -> bool:
    """Whether ``session_id`` is a lowercase UUID (the shape :func:`validate_session_id` requires)."""
    return _SESSION_ID.fullmatch(session_id) is not None


def validate_session_id(session_id: str, field: str = "session_id") -> str:
    """Return ``session_id`` if it is a lowercase UUID; raise FileNameError naming ``field`` (the
    request field that carried it: ``session_id``, ``parent_session_id``, ...) otherwise."""
    if not _SESSION_ID.fullmatch(session_id):
        raise FileNameError(field, f"must be a lowercase UUID, got {clip(session_id)!r}")
    return session_id


def validate_agent_name(agent_name: str) -> str:
    """Return ``agent_name`` if it may appear in a file name; raise FileNameError otherwise.

    Empty is allowed (no agent name). Otherwise 1-64 of ``[A-Za-z0-9._-]``, not
    starting with ``.``, without ``..``: no ``/``, no control characters, never a path.
    """
    if agent_name and (not _AGENT_NAME.fullmatch(agent_name) or ".." in agent_name):
        raise FileNameError(
            "agent_name",
            f"must be 1-{AGENT_NAME_MAX_CHARS} characters of letters, digits, '.', '_', '-',"
            f" not start with '.' nor contain '..'; got {clip(agent_name)!r}",
        )
    return agent_name


def build_file_name(created_at: datetime, session_id: str, agent_name: str = "") -> str:
    """The file name of a session (the mirror of :func:`parse_file_name`).

    ``created_at`` is converted to UTC and cut to whole seconds. Raises
    FileNameError for a bad session id or agent name.
    """
    validate_session_id(session_id)
    validate_agent_name(agent_name)
    moment = created_at.astimezone(UTC) if created_at.tzinfo else created_at
    # Fields written out by hand: strftime's %Y does not zero-pad years before 1000.
    stem = (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}_"
        f"{moment.hour:02d}{moment.minute:02d}{moment.second:02d}_{session_id}"
    )
    return f"{stem}_{agent_name}{FILE_SUFFIX}" if agent_name else stem + FILE_SUFFIX


def session_file_name(name: str) -> SessionFileName | None:
    """The parsed name of a session file, or None for any other entry of the sessions folder
    (a temporary, a torn-tail sidecar ``<file>.torn-<n>``, a stray file). The writer's index,
    the reader's folder and the data root's scan take the same entries for sessions."""
    if not name.endswith(FILE_SUFFIX):
        return None  # the common case of a non-session entry, without a regex
    try:
        return parse_file_name(name)
    except FileNameError:
        return None


def parse_file_name(name: str) -> SessionFileName:
    """Parse a session file name (the mirror of :func:`build_file_name`).

    Raises FileNameError when ``name`` is not of the documented shape.
    """
    match = _FILE_NAME.fullmatch(name)
    if match is None:
        raise FileNameError(
            "file_name", f"{clip(name)!r} is not <YYYY-MM-DD>_<HHMMSS>_<uuid>[_<agent>].jsonl"
        )
    session_id = validate_session_id(match["session_id"])
    agent_name = validate_agent_name(match["agent_name"] or "")
    try:
        # int() over the six groups: strptime would cost ~30 µs a name, and listings parse thousands.
        year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
        created_at = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError as exc:
        raise FileNameError("file_name", f"{clip(name)!r} has no valid date and time") from exc
    return SessionFileName(created_at, session_id, agent_name)
