"""Sessions named by the caller's own key, unique per tenant (CreateSession.session_key, ResolveSession)."""

from __future__ import annotations

import pytest

from rollout_client import AlreadyExistsError, InvalidArgumentError, user
from serving.tenancy import CALLER, Caller, keyed_session_id
from shared.layout import DataRoot
from shared.naming import is_session_id, keyed_session_ids, session_id_for_key
from shared.shards import shard_of

NOTHING_DELETED: dict = {"shard_of": lambda _: 0, "deleted": lambda _: False}


def test_a_key_names_one_session_that_resolve_finds(client) -> None:
    """create_session(session_key=k) makes the session k names; resolve_session(k) finds it."""
    assert client.resolve_session("chat-1") == (session_id_for_key("default", "chat-1"), False)
    session = client.create_session(session_key="chat-1")
    assert session.id == session_id_for_key("default", "chat-1")
    session.append(user("hello"))
    assert client.resolve_session("chat-1") == (session.id, True)
    with pytest.raises(AlreadyExistsError) as taken:
        client.create_session(session_key="chat-1")
    assert taken.value.session_id == session.id


def test_the_same_key_in_two_tenants_names_two_sessions(client) -> None:
    """Without authentication the tenant field scopes the key; "" and "default" are one tenant."""
    first = client.create_session(session_key="shared-name", tenant="team-a")
    second = client.create_session(session_key="shared-name", tenant="team-b")
    assert first.id != second.id
    assert client.resolve_session("shared-name", tenant="team-a") == (first.id, True)
    assert (
        client.resolve_session("shared-name")[0] == client.resolve_session("shared-name", tenant="default")[0]
    )


def test_a_session_id_given_as_a_key_names_that_session(client) -> None:
    """A key that is the id of an existing session resolves to it (a LedgerSession opened by its id)."""
    session = client.create_session()
    assert client.resolve_session(session.id) == (session.id, True)


def test_an_empty_or_overlong_key_is_refused(client) -> None:
    """INVALID_ARGUMENT naming session_key, on both services."""
    with pytest.raises(InvalidArgumentError, match="session_key"):
        client.resolve_session("")
    with pytest.raises(InvalidArgumentError, match="session_key"):
        client.create_session(session_key="k" * 513)


def test_key_ids_are_pinned() -> None:
    """The derivation is part of the contract: known keys give known ids (UUID version 8)."""
    assert session_id_for_key("default", "chat-session") == "56d7999d-d68e-8aba-94dc-2a35eb0384dd"
    assert is_session_id(session_id_for_key("t", "é" * 512))
    assert session_id_for_key("a", "bc") != session_id_for_key("ab", "c")


def test_an_authenticated_caller_derives_in_its_own_tenant() -> None:
    """With credentials the caller's tenant scopes the key, whatever the request's tenant field says."""
    token = CALLER.set(Caller("team-a", importer=False))
    try:
        assert keyed_session_id("", "k", **NOTHING_DELETED) == session_id_for_key("team-a", "k")
    finally:
        CALLER.reset(token)
    assert keyed_session_id("", "k", **NOTHING_DELETED) == session_id_for_key("default", "k")


def test_a_key_whose_session_was_deleted_names_a_new_session(client, data_dir) -> None:
    """Deleting a keyed session releases the key (docs/deletion.md §2.2): the key then resolves,
    creates and forks to its next id, the same on the writer and the reader, and the deleted id
    is never used again. The ids of one key share its first id's shard."""
    first = client.create_session(session_key="thread-7")
    first.append(user("before"))
    client.delete_session(first.id)
    chain = keyed_session_ids("default", "thread-7", DataRoot(data_dir).shard_of)
    assert next(chain) == first.id
    second_id, third_id = next(chain), next(chain)
    assert len({first.id, second_id, third_id}) == 3
    assert client.resolve_session("thread-7") == (second_id, False)
    second = client.create_session(session_key="thread-7")
    assert second.id == second_id
    assert client.resolve_session("thread-7") == (second_id, True)
    second.append(user("after"))
    assert [message["content"] for message in second.replay().messages] == ["after"]
    with pytest.raises(AlreadyExistsError, match="never used again"):
        client.create_session(session_id=first.id)
    with pytest.raises(AlreadyExistsError, match="never used again"):  # given with its key
        client.create_session(session_id=first.id, session_key="thread-7")
    client.delete_session(second_id)
    source = client.create_session()
    source.append(user("copied"))
    fork = source.fork(at_seq=1, session_key="thread-7")  # a keyed Fork follows the same rule
    assert fork.id == third_id
    assert client.resolve_session("thread-7") == (third_id, True)


def test_later_ids_of_a_key_stay_in_its_first_ids_shard() -> None:
    """Whatever the shard count, every id a key names lands in the first one's shard."""
    for shards in (1, 7, 256):
        ids = keyed_session_ids("acme", "k", lambda session_id, n=shards: shard_of(session_id, n))
        first = next(ids)
        later = [next(ids) for _ in range(3)]
        assert {shard_of(session_id, shards) for session_id in later} == {shard_of(first, shards)}
        assert all(is_session_id(session_id) for session_id in later)
