"""shared.memory: provenance stamped from the records, the checks that refuse a result, the artifact line."""

from __future__ import annotations

import orjson
import pytest

from shared.digest import LinesDigest
from shared.memory import (
    BAD_SUPERSESSION,
    NO_CITATION,
    NO_SUCH_SEQ,
    NOT_A_MESSAGE,
    SOURCE_CHANGED,
    UNKNOWN_ARTIFACT,
    Artifact,
    ArtifactKind,
    Generator,
    ProvenanceError,
    Scope,
    SourceKind,
    SourceRecord,
    StaleMark,
    Supersession,
    check_source,
    check_supersession,
    merge_sources,
    scope_of,
    stale_mark_of,
    stamp_source,
)
from shared.records import RecordType, encode_line

SESSION = "01a22c15-89a6-7d3d-b5b7-165622bd350c"
TS = "2026-12-02T10:00:00.000000Z"


def record(seq: int, record_type: str, payload: dict) -> SourceRecord:
    return SourceRecord(
        seq, record_type, TS, payload, encode_line(seq, TS, record_type, payload).rstrip(b"\n")
    )


def session_records(originator: str = "") -> list[SourceRecord]:
    meta = {
        "session_id": SESSION,
        "tenant": "acme",
        "cwd": "/src",
        "agent_name": "director",
        "created_at": TS,
    }
    if originator:
        meta["originator"] = originator
    return [
        record(0, "session_meta", meta),
        record(1, "message", {"role": "user", "content": "the plan costs $20"}),
        record(
            2,
            "message",
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
                ],
            },
        ),
        record(3, "message", {"role": "tool", "tool_call_id": "c1", "content": "page: the plan costs $25"}),
        record(
            4,
            "turn_context",
            {"cwd": "/src/app", "git": {"repository_url": "git@example.test:shop", "branch": "main"}},
        ),
        record(5, "message", {"role": "system", "content": "be brief"}),
    ]


def test_kinds_come_from_the_records():
    """Each cited seq's kind is its record's role: user, tool output, instruction; the range is pinned by the lines digest."""
    source = stamp_source(SESSION, session_records(), [3, 1, 5, 3])
    assert [(c.seq, c.kind, c.role) for c in source.citations] == [
        (1, SourceKind.USER, "user"),
        (3, SourceKind.TOOL_OUTPUT, "tool"),
        (5, SourceKind.INSTRUCTION, "system"),
    ]
    assert (source.first_seq, source.last_seq) == (1, 5)
    assert source.lines_digest.startswith("sha256:lines:v1:")


def test_the_lines_digest_is_shared_digest_over_the_range_checks():
    """The lines digest is shared.digest.LinesDigest over the line checks of the cited range, first to last."""
    from array import array

    records = session_records()
    source = stamp_source(SESSION, records, [1, 3])
    lines = LinesDigest()
    lines.add(array("I", [orjson.loads(r.line)["crc32c"] for r in records[1:4]]))
    assert source.lines_digest == lines.result()


def test_a_session_an_importer_wrote_is_imported():
    """A message of a session an importer wrote is imported, whatever its role."""
    source = stamp_source(SESSION, session_records("codex"), [1])
    assert source.citations[0].kind == SourceKind.IMPORTED


@pytest.mark.parametrize(
    ("cited", "reason"),
    [([9], NO_SUCH_SEQ), ([0], NOT_A_MESSAGE), ([4], NOT_A_MESSAGE), ([], NO_CITATION)],
    ids=["missing", "session_meta", "turn_context", "nothing"],
)
def test_a_citation_that_is_not_a_message_of_the_session_is_refused(cited, reason):
    """A seq the session lacks, a record that is no message, or no citation at all: refused with the reason."""
    with pytest.raises(ProvenanceError) as refused:
        stamp_source(SESSION, session_records(), cited)
    assert refused.value.reason == reason


def test_a_changed_line_in_the_cited_range_refuses_the_source():
    """A line between the first and last cited seq that changed (its bytes fail their check) refuses the source."""
    records = session_records()
    source = stamp_source(SESSION, records, [1, 3])
    check_source(source, records)
    changed = list(records)
    changed[2] = SourceRecord(
        2, "message", TS, records[2].payload, records[2].line.replace(b"fetch", b"fetcH")
    )
    with pytest.raises(ProvenanceError) as refused:
        check_source(source, changed)
    assert refused.value.reason == SOURCE_CHANGED


def test_a_rewritten_line_with_a_fresh_check_refuses_the_source():
    """A cited line replaced by another (sealed anew, so its own check passes) changes the lines digest: refused."""
    records = session_records()
    source = stamp_source(SESSION, records, [1])
    changed = [
        records[0],
        record(1, "message", {"role": "user", "content": "the plan costs $2"}),
        *records[2:],
    ]
    with pytest.raises(ProvenanceError) as refused:
        check_source(source, changed)
    assert refused.value.reason == SOURCE_CHANGED


def test_a_missing_seq_refuses_the_source():
    """A cited range whose records are no longer all there is refused (no_such_seq)."""
    records = session_records()
    source = stamp_source(SESSION, records, [1, 3])
    with pytest.raises(ProvenanceError) as refused:
        check_source(source, records[:3])
    assert refused.value.reason == NO_SUCH_SEQ


def artifact(artifact_id: str, sources, supersedes=()) -> Artifact:
    return Artifact(
        artifact_id=artifact_id,
        kind=ArtifactKind.MEMORY,
        text="t",
        tenant="acme",
        scope=Scope(cwd="/src"),
        created_at=TS,
        generator=Generator("m", "v1"),
        sources=tuple(sources),
        supersedes=tuple(supersedes),
    )


def test_supersession_needs_a_known_artifact_and_evidence_among_the_citations():
    """Superseding names a stored artifact and a session and seq the superseding artifact cites."""
    records = session_records()
    source = stamp_source(SESSION, records, [3])
    known = {"mem_old": artifact("mem_old", [stamp_source(SESSION, records, [1])])}
    check_supersession(Supersession("mem_old", SESSION, 3), [source], known)
    with pytest.raises(ProvenanceError) as unknown:
        check_supersession(Supersession("mem_other", SESSION, 3), [source], known)
    assert unknown.value.reason == UNKNOWN_ARTIFACT
    with pytest.raises(ProvenanceError) as uncited:
        check_supersession(Supersession("mem_old", SESSION, 1), [source], known)
    assert uncited.value.reason == BAD_SUPERSESSION


def test_merged_sources_keep_every_citation_and_its_kind():
    """A consolidation's sources are its inputs' sources, each once, never re-stamped."""
    records = session_records()
    tool = stamp_source(SESSION, records, [3])
    said = stamp_source(SESSION, records, [1])
    merged = merge_sources([artifact("a", [tool]), artifact("b", [said, tool])])
    assert merged == (tool, said)
    assert [c.kind for s in merged for c in s.citations] == [SourceKind.TOOL_OUTPUT, SourceKind.USER]


def test_an_artifact_survives_its_json():
    """An artifact read back from its JSON is the artifact written."""
    records = session_records()
    written = artifact("mem_1", [stamp_source(SESSION, records, [1, 3])], [Supersession("mem_0", SESSION, 3)])
    assert Artifact.from_json(orjson.loads(orjson.dumps(written.to_json()))) == written


def test_the_scope_comes_from_session_meta_and_turn_contexts():
    """cwd and agent from the session_meta, repository and branch (and a later cwd) from turn contexts."""
    scope = scope_of(session_records())
    assert scope == Scope(cwd="/src/app", repository="git@example.test:shop", branch="main", agent="director")
    assert scope.key() != Scope(cwd="/src/app").key()
    assert len(scope.key()) == 32


def test_every_record_type_has_a_staleness_decision():
    """Every record type after the cited range is decided: compaction and a forced resume over damage mark, the rest do not."""
    marks = {}
    for record_type in RecordType:
        payload = (
            {"kind": "resumed", "body": {"forced": True, "damage": [{"kind": "x"}]}}
            if record_type == RecordType.EVENT
            else {}
        )
        marks[record_type] = stale_mark_of(record(9, record_type.value, payload), 5)
    assert marks.pop(RecordType.COMPACTED) == StaleMark.COMPACTED
    assert marks.pop(RecordType.EVENT) == StaleMark.RESUMED_OVER_DAMAGE
    assert set(marks.values()) == {None}
    assert stale_mark_of(record(4, "compacted", {}), 5) is None
    assert stale_mark_of(record(9, "event", {"kind": "resumed", "body": {}}), 5) is None
