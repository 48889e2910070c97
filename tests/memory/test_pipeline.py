"""The pipeline's checks: results refused against their sources, staleness marks, and the command line."""

from __future__ import annotations

import json
import os
import sys

import pytest

from rollout_client import Compaction, assistant, user
from rollout_memory import CommandExtractor, ExtractorError, MemoryPipeline, PipelineConfig, get_memories
from shared.layout import DataRoot
from shared.memory import ArtifactKind, SourceRecord
from tests.conftest import run_rollout
from tests.memory.conftest import CWD, TENANT

SCOPE_ALL = None


def stopped(client, *messages, kind: str = "completed"):
    session = client.create_session("director", root=True, tenant=TENANT, cwd=CWD)
    seqs = session.append(*messages).seqs
    session.stop(kind, "done")
    return session, seqs


def test_results_that_fail_their_checks_are_refused_with_the_reason_and_recorded(client, store, pipeline_for):
    """A seq the session lacks, the session_meta, an unknown artifact superseded: refused and recorded; the good item is kept."""

    def responder(request):
        seq = request["messages"][0]["seq"]
        return {
            "summary": {"text": "A summary.", "cites": [seq]},
            "memories": [
                {"text": "kept", "cites": [seq]},
                {"text": "invented", "cites": [seq + 1000]},
                {"text": "meta", "cites": [0]},
                {
                    "text": "overreach",
                    "cites": [seq],
                    "supersedes": [{"artifact_id": "mem_nope", "evidence_seq": seq}],
                },
                {"text": "bad cites", "cites": ["1"]},
            ],
        }

    pipeline, fake = pipeline_for(responder, attempts=2)
    session, _ = stopped(client, user("hello"), assistant("hi"))
    report = pipeline.run()
    assert report.distilled == [session.id]
    assert len(fake.extract_requests()) == 2  # a result with refusals is asked again once
    assert sorted((r["reason"], r["text"]) for r in report.refused) == [
        ("bad_result", "bad cites"),
        ("no_such_seq", "invented"),
        ("not_a_message", "meta"),
        ("unknown_artifact", "overreach"),
    ]
    views = get_memories(store, tenant=TENANT, scope=SCOPE_ALL, kinds=tuple(ArtifactKind))
    assert sorted(v.artifact.text for v in views) == ["A summary.", "kept"]
    [summary] = [v for v in views if v.artifact.kind == ArtifactKind.ROLLOUT_SUMMARY]
    assert summary.artifact.stop_seq == session.stop_facts().stop_seq
    [key] = store.scope_keys(TENANT)
    assert len(store.read_scope(TENANT, key).refused) == 4


def test_a_source_that_changed_since_it_was_read_is_refused(client, store, pipeline_for):
    """Between extraction and commit the cited line changed: the artifact is refused as source_changed."""

    def responder(request):
        return {"memories": [{"text": "fact", "cites": [request["messages"][0]["seq"]]}]}

    pipeline, _ = pipeline_for(responder)
    session, _ = stopped(client, user("the fact"))
    reads = []
    original = MemoryPipeline.read_records

    def changing(self, session_id, upto_seq):
        records = original(self, session_id, upto_seq)
        reads.append(session_id)
        if len(reads) > 1:  # the re-read before the commit
            return [
                SourceRecord(r.seq, r.type, r.ts, r.payload, r.line.replace(b"the fact", b"the FACT"))
                for r in records
            ]
        return records

    pipeline.read_records = changing.__get__(pipeline)
    report = pipeline.run()
    assert [r["reason"] for r in report.refused] == ["source_changed"]
    assert get_memories(store, tenant=TENANT, scope=SCOPE_ALL) == []
    assert report.distilled == [session.id]


def test_a_compacted_or_deleted_source_marks_its_artifacts(ledger, client, store, pipeline_for):
    """A compaction after the cited range marks an artifact compacted; a source gone marks it deleted."""

    def responder(request):
        if request["task"] == "consolidate":
            return {"memories": []}
        first = request["messages"][0]
        return {"memories": [{"text": f"from {first['text']}", "cites": [first["seq"]]}]}

    pipeline, _ = pipeline_for(responder)
    compacted, _ = stopped(client, user("compacted later"), kind="paused")
    deleted, _ = stopped(client, user("deleted later"))
    pipeline.run()
    compacted.resume()
    compacted.append(Compaction("earlier talk, summarized"), user("after the compaction"))
    compacted.stop("completed", "done")
    _, path = DataRoot(ledger.data_dir).locate(deleted.id)
    os.unlink(path)
    report = pipeline.run()
    marks = {
        v.artifact.text: [m.value for m in v.marks]
        for v in get_memories(store, tenant=TENANT, scope=SCOPE_ALL)
    }
    assert marks["from compacted later"] == ["compacted"]
    assert marks["from deleted later"] == ["deleted"]
    assert len(report.marked) == 2
    assert pipeline.run().marked == []  # once per mark


def test_the_command_line_lists_shows_and_forgets(ledger, client, store, pipeline_for):
    """rollout memory ls / show --resolve / forget over the store the pipeline wrote."""

    def responder(request):
        first = request["messages"][0]
        return {"memories": [{"text": "Ships from Lyon.", "cites": [first["seq"]]}]}

    pipeline, _ = pipeline_for(responder)
    session, seqs = stopped(client, user("we ship from Lyon"))
    pipeline.run()
    [view] = get_memories(store, tenant=TENANT, scope=SCOPE_ALL)
    common = ("--data-dir", str(ledger.data_dir), "--tenant", TENANT)

    listed = run_rollout("memory", "ls", *common)
    assert listed.returncode == 0, listed.stderr
    assert view.artifact.artifact_id in listed.stdout
    assert "Ships from Lyon." in listed.stdout
    assert (
        run_rollout("memory", "ls", "--data-dir", str(ledger.data_dir), "--tenant", "other").stdout.strip()
        == "no artifacts"
    )

    shown = run_rollout(
        "memory", "show", view.artifact.artifact_id, *common, "--resolve", "--reader", ledger.reader
    )
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["messages"] == [
        {
            "session_id": session.id,
            "seq": seqs[0],
            "kind": "user",
            "message": {"role": "user", "content": "we ship from Lyon"},
        }
    ]
    assert document["problems"] == []
    missing = run_rollout(
        "memory", "show", view.artifact.artifact_id, "--data-dir", str(ledger.data_dir), "--tenant", "other"
    )
    assert missing.returncode == 1
    assert "NOT_FOUND" in missing.stderr

    forgot = run_rollout("memory", "forget", *common, "--session", session.id, "--by", "ops")
    assert forgot.returncode == 0, forgot.stderr
    assert view.artifact.artifact_id in forgot.stdout
    assert get_memories(store, tenant=TENANT, scope=SCOPE_ALL) == []
    assert store.read_scope(TENANT, view.artifact.scope.key()).forgotten[0]["by"] == "ops"
    assert pipeline.run().distilled == []  # forgotten, not distilled again


def test_a_local_command_is_an_extractor(client, store):
    """--extractor-command: the request on stdin, the result on stdout; a failing command is an ExtractorError."""
    script = (
        "import json,sys; r=json.load(sys.stdin);"
        "m=r.get('messages') or [];"
        "print(json.dumps({'memories':[{'text':'cmd: '+m[0]['text'],'cites':[m[0]['seq']]}] if m else []}))"
    )
    extractor = CommandExtractor([sys.executable, "-c", script])
    pipeline = MemoryPipeline(client, store, extractor, tenant=TENANT, config=PipelineConfig(worker_id="w1"))
    stopped(client, user("from a command"))
    assert pipeline.run().distilled
    [view] = get_memories(store, tenant=TENANT, scope=SCOPE_ALL)
    assert view.artifact.text == "cmd: from a command"
    assert view.artifact.generator.model == "command"
    failing = CommandExtractor([sys.executable, "-c", "import sys; sys.exit(3)"])
    with pytest.raises(ExtractorError, match="exited with 3"):
        failing.run({"task": "extract"})
