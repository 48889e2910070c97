"""Workers: leased jobs, a worker killed mid-job and restarted, two workers at once, retries."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter

import orjson

from memory_store.store import SCOPES_DIR
from rollout_client import assistant, user
from rollout_memory import MemoryPipeline, PipelineConfig
from rollout_memory.extractors import ChatCompletionsExtractor
from tests.memory.conftest import CWD, TENANT
from tests.memory.fake_openai import FakeChatCompletions
from tests.processes import launch, reap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stopped_sessions(client, count: int) -> list[str]:
    ids = []
    for n in range(count):
        session = client.create_session("director", root=True, tenant=TENANT, cwd=CWD)
        session.append(user(f"fact number {n}"), assistant("ok"))
        session.stop("completed", "done")
        ids.append(session.id)
    return ids


def remember_first(request):
    if request["task"] == "consolidate":
        return {"memories": []}
    first = request["messages"][0]
    return {"memories": [{"text": f"remembered: {first['text']}", "cites": [first["seq"]]}]}


def commits_per_session(store) -> Counter[str]:
    """How many commit lines each session has in the tenant's store (read as the files hold them)."""
    counted: Counter[str] = Counter()
    folder = store.tenant_folder(TENANT) / SCOPES_DIR
    for name in os.listdir(folder):
        for line in (folder / name).read_bytes().splitlines():
            entry = orjson.loads(line)
            if entry["entry"] == "commit" and "session_id" in entry["job"]:
                counted[entry["job"]["session_id"]] += 1
    return counted


def test_a_worker_killed_mid_job_and_restarted_distills_every_session_once(ledger, client, store):
    """Killed while the extractor answers for its second session, a worker restarted under the same id distills each session exactly once."""
    sessions = stopped_sessions(client, 3)
    reached = threading.Event()
    release = threading.Event()
    asked: list[str] = []

    def blocking(request):
        if request["task"] == "extract":
            asked.append(request["session_id"])
            if len(set(asked)) == 2 and not release.is_set():
                reached.set()
                release.wait()
                raise RuntimeError("the worker is gone")
        return remember_first(request)

    with FakeChatCompletions(blocking) as fake:
        worker = launch(
            [
                sys.executable,
                "-m",
                "rollout_cli.main",
                "memory",
                "run",
                "--data-dir",
                str(ledger.data_dir),
                "--tenant",
                TENANT,
                "--reader",
                ledger.reader,
                "--extractor-url",
                fake.base_url,
                "--extractor-model",
                "fake-model",
                "--worker-id",
                "w1",
                "--attempts",
                "1",
            ],
            cwd=REPO,
            env={**os.environ, "OPENAI_API_KEY": "sk-test"},
            stdout=subprocess.DEVNULL,
        )
        try:
            assert reached.wait(120), "the worker never reached its second session"
            reap(worker)  # SIGKILL mid-job
        finally:
            release.set()
            reap(worker)
        interrupted = asked[-1]
        assert commits_per_session(store) == Counter({asked[0]: 1})
        assert (store.leases_folder(TENANT) / f"{interrupted}.lease").exists()

        fake.responder = remember_first
        extractor = ChatCompletionsExtractor(fake.base_url, "fake-model", "sk-test")
        restarted = MemoryPipeline(
            client,
            store,
            extractor,
            tenant=TENANT,
            config=PipelineConfig(worker_id="w1"),
            sleep=lambda _s: None,
        )
        report = restarted.run()
        assert sorted(report.distilled) == sorted(set(sessions) - {asked[0]})
        assert commits_per_session(store) == Counter({session: 1 for session in sessions})
        assert restarted.run().distilled == []
        assert Counter(asked)[asked[0]] == 1


def test_two_workers_at_once_never_distill_one_session_twice(ledger, store):
    """Two workers run over the same sessions at once: each session is asked for once and committed once."""
    with ledger.client() as first_client, ledger.client() as second_client:
        sessions = stopped_sessions(first_client, 6)
        with FakeChatCompletions(remember_first) as fake:
            extractor = ChatCompletionsExtractor(fake.base_url, "fake-model", "sk-test")
            pipelines = [
                MemoryPipeline(c, store, extractor, tenant=TENANT, config=PipelineConfig(worker_id=w))
                for c, w in ((first_client, "w1"), (second_client, "w2"))
            ]
            reports = []
            threads = [threading.Thread(target=lambda p=p: reports.append(p.run())) for p in pipelines]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            distilled = [s for report in reports for s in report.distilled]
            assert sorted(distilled) == sorted(sessions)
            assert commits_per_session(store) == Counter({session: 1 for session in sessions})
            extracted = Counter(r["session_id"] for r in fake.extract_requests())
            assert extracted == Counter({session: 1 for session in sessions})


def test_a_failing_extractor_is_retried_with_backoff_and_a_session_left_failed_is_not_skipped(client, store):
    """Extractor errors are retried with doubling backoff; a job that fails every attempt is done by the next run."""
    [session] = stopped_sessions(client, 1)
    failures = [3]

    def flaky(request):
        if failures[0] > 0:
            failures[0] -= 1
            raise RuntimeError("overloaded")
        return remember_first(request)

    slept: list[float] = []
    with FakeChatCompletions(flaky) as fake:
        extractor = ChatCompletionsExtractor(fake.base_url, "fake-model", "sk-test")
        config = PipelineConfig(worker_id="w1", attempts=2, backoff_seconds=0.5)
        pipeline = MemoryPipeline(client, store, extractor, tenant=TENANT, config=config, sleep=slept.append)
        first = pipeline.run()
        assert session in first.failed
        assert first.distilled == []
        second = pipeline.run()
        assert second.distilled == [session]
    assert slept == [0.5, 0.5]
    assert commits_per_session(store) == Counter({session: 1})
