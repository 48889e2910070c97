"""Fork with a session key (writer.proto ForkRequest.session_key): the fork gets the id the key
names in the source's tenant, ResolveSession finds it, and a taken key is refused."""

from __future__ import annotations

import pytest

from rollout_client import AlreadyExistsError, user


def test_a_keyed_fork_takes_the_id_its_key_names(client) -> None:
    source = client.create_session("agent", root=True, tenant="acme", session_key="thread-a")
    source.append(user("hello"))
    expected, found = client.resolve_session("thread-b", tenant="acme")
    assert not found
    fork = source.fork(at_seq=1, session_key="thread-b")
    assert fork.id == expected
    assert client.resolve_session("thread-b", tenant="acme") == (expected, True)
    assert fork.replay().messages == [user("hello")]
    assert fork.append(user("more")).seqs == (3,)  # 0 meta, 1 the copy, 2 the forked event
    assert source.replay().messages == [user("hello")]


def test_a_taken_key_is_refused_and_nothing_is_made(client) -> None:
    source = client.create_session("agent", root=True, session_key="thread-c")
    source.append(user("hello"))
    taken = client.create_session("other", root=True, session_key="thread-d")  # another file name
    with pytest.raises(AlreadyExistsError) as refused:
        source.fork(at_seq=1, session_key="thread-d")
    assert refused.value.session_id == taken.id
    with pytest.raises(AlreadyExistsError):
        source.fork(at_seq=1, session_key="thread-c")  # its own key names itself
    assert taken.replay().messages == []


def test_a_key_whose_session_was_deleted_names_the_forks_new_id(client) -> None:
    """A deletion releases the key (docs/deletion.md §2.2.1): a keyed fork takes its next id."""
    source = client.create_session("agent", root=True, session_key="thread-e")
    source.append(user("hello"))
    gone = client.create_session("other", root=True, session_key="thread-f")
    client.delete_session(gone.id)
    next_id, found = client.resolve_session("thread-f")
    assert not found
    assert next_id != gone.id
    fork = source.fork(at_seq=1, session_key="thread-f")
    assert fork.id == next_id
    assert client.resolve_session("thread-f") == (next_id, True)
