"""memory_store.store: entries appended and fsynced per scope, the watermark fence, torn lines, forget."""

from __future__ import annotations

import orjson
import pytest

from memory_store.store import MemoryStore
from shared.memory import Artifact, ArtifactKind, Generator, Scope, Source, StaleMark, stamp_source
from tests.memory.test_provenance import SESSION, TS, session_records

SCOPE = Scope(cwd="/src")
OTHER = "01a22c15-89a6-7d3d-b5b7-165622bd3500"


def artifact(artifact_id: str, session: str = SESSION, tenant: str = "acme") -> Artifact:
    source = stamp_source(SESSION, session_records(), [1])
    source = Source(session, source.first_seq, source.last_seq, source.lines_digest, source.citations)
    return Artifact(
        artifact_id,
        ArtifactKind.MEMORY,
        f"text of {artifact_id}",
        tenant,
        SCOPE,
        TS,
        Generator("m", "v1"),
        (source,),
    )


@pytest.fixture
def store(tmp_path) -> MemoryStore:
    return MemoryStore(tmp_path / "memories")


def test_a_job_is_committed_once(store):
    """A second commit of a session up to the same stop writes nothing (the fence); a later stop commits."""
    assert store.commit_job("acme", SCOPE, SESSION, 7, [artifact("mem_a")])
    assert not store.commit_job("acme", SCOPE, SESSION, 7, [artifact("mem_b")])
    assert not store.commit_job("acme", SCOPE, SESSION, 5, [artifact("mem_b")])
    assert store.watermarks("acme") == {SESSION: 7}
    assert store.commit_job("acme", SCOPE, SESSION, 9, [artifact("mem_c")])
    assert list(store.read_scope("acme", SCOPE.key()).artifacts) == ["mem_a", "mem_c"]


def test_files_are_private(store):
    """Scope files are 0600, tenant folders 0700."""
    store.commit_job("acme", SCOPE, SESSION, 7, [artifact("mem_a")])
    assert store.scope_path("acme", SCOPE.key()).stat().st_mode & 0o777 == 0o600
    assert store.tenant_folder("acme").stat().st_mode & 0o777 == 0o700


def test_a_torn_last_line_is_no_entry_and_is_cut_before_the_next_append(store):
    """A line without its newline (a crash mid-write) is not read, and the next append starts after the last whole line."""
    store.commit_job("acme", SCOPE, SESSION, 7, [artifact("mem_a")])
    path = store.scope_path("acme", SCOPE.key())
    with path.open("ab") as file:
        file.write(
            b'{"v":1,"entry":"commit","tenant":"acme","job":{"session_id":"'
            + OTHER.encode()
            + b'","stop_seq":3},"artif'
        )
    assert store.watermarks("acme") == {SESSION: 7}
    assert store.commit_job("acme", SCOPE, OTHER, 3, [artifact("mem_b", OTHER)])
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [orjson.loads(line)["job"]["session_id"] for line in lines[:-1]] == [SESSION, OTHER]


def test_forget_a_session_removes_its_artifacts_records_it_and_keeps_the_watermark(store):
    """forget --session: the artifacts citing it leave the file (text and marks too); a forgotten entry names them; the session is not distilled again."""
    store.commit_job(
        "acme",
        SCOPE,
        SESSION,
        7,
        [artifact("mem_a")],
        [{"reason": "no_such_seq", "message": "m", "text": "secret"}],
    )
    store.commit_job("acme", SCOPE, OTHER, 4, [artifact("mem_b", OTHER)])
    store.mark("acme", SCOPE.key(), "mem_a", StaleMark.COMPACTED, {"seq": 9})
    assert store.forget("acme", session_id=SESSION, by="ops") == ["mem_a"]
    data = store.scope_path("acme", SCOPE.key()).read_bytes()
    assert b"text of mem_a" not in data
    assert b"secret" not in data
    state = store.read_scope("acme", SCOPE.key())
    assert list(state.artifacts) == ["mem_b"]
    assert state.marks == {}
    [forgotten] = state.forgotten
    assert forgotten["what"] == {"session_id": SESSION}
    assert forgotten["artifact_ids"] == ["mem_a"]
    assert forgotten["by"] == "ops"
    assert store.watermarks("acme") == {SESSION: 7, OTHER: 4}


def test_forget_a_scope_removes_all_of_it(store):
    """forget --scope-key: every artifact of the scope goes; the record and the watermarks stay."""
    store.commit_job("acme", SCOPE, SESSION, 7, [artifact("mem_a")])
    store.commit_job("acme", SCOPE, OTHER, 4, [artifact("mem_b", OTHER)])
    assert store.forget("acme", scope_key=SCOPE.key()) == ["mem_a", "mem_b"]
    state = store.read_scope("acme", SCOPE.key())
    assert state.artifacts == {}
    assert state.forgotten[0]["what"] == {"scope": SCOPE.key()}
    assert store.watermarks("acme") == {SESSION: 7, OTHER: 4}


def test_tenants_have_folders_of_their_own(store):
    """A tenant reads, finds, forgets and fences nothing of another's."""
    store.commit_job("acme", SCOPE, SESSION, 7, [artifact("mem_a")])
    assert store.tenant_folder("acme") != store.tenant_folder("globex")
    assert store.scope_keys("globex") == []
    assert store.find_artifact("globex", "mem_a") is None
    assert store.forget("globex", session_id=SESSION) == []
    assert store.commit_job("globex", SCOPE, SESSION, 7, [artifact("mem_g", tenant="globex")])
    assert list(store.read_scope("acme", SCOPE.key()).artifacts) == ["mem_a"]


def test_entries_of_another_tenant_in_a_tenants_file_are_not_read(store):
    """A line naming another tenant (a file copied by hand) is not read as this tenant's."""
    store.commit_job("globex", SCOPE, SESSION, 7, [artifact("mem_g", tenant="globex")])
    store.commit_job("acme", SCOPE, OTHER, 3, [artifact("mem_a", OTHER)])
    stolen = store.scope_path("globex", SCOPE.key()).read_bytes()
    with store.scope_path("acme", SCOPE.key()).open("ab") as file:
        file.write(stolen)
    assert list(store.read_scope("acme", SCOPE.key()).artifacts) == ["mem_a"]


def test_a_damaged_line_is_reported_and_skipped(store):
    """A line that is not an entry is reported by its number; the entries around it are read."""
    store.commit_job("acme", SCOPE, SESSION, 7, [artifact("mem_a")])
    with store.scope_path("acme", SCOPE.key()).open("ab") as file:
        file.write(b"\x00\x00not json\n")
        file.write(
            b'{"v":1,"entry":"commit","tenant":"acme","job":{"session_id":"x","stop_seq":1},"artifacts":[{}]}\n'
        )
    store.commit_job("acme", SCOPE, OTHER, 3, [artifact("mem_b", OTHER)])
    state = store.read_scope("acme", SCOPE.key())
    assert state.damaged == [2, 3]
    assert list(state.artifacts) == ["mem_a", "mem_b"]
    assert "x" not in state.watermarks  # a damaged commit moves no watermark
