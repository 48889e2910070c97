"""rollout_client.in_process: a writer and a reader inside the test's own process, reached by both
clients as services over the network; the README's example of it runs as printed."""

from __future__ import annotations

import asyncio
import re
import threading

from rollout_client import user
from rollout_client.in_process import InProcessLedger
from tests.conftest import REPO


def test_an_in_process_pair_serves_both_clients_and_releases_its_data_root(tmp_path) -> None:
    """Both clients append and replay; once closed, another pair starts on the same root (the
    writer's lock was released) and finds the sessions; no thread of the pair is left."""
    root = tmp_path / "ledger"
    with InProcessLedger(root) as ledger, ledger.client() as client:
        session = client.create_session()
        session.append(user("blocking"))
        remote = ledger.async_client()

        async def more() -> list[str]:
            attached = remote.session(session.id)
            await attached.append(user("async"))
            replay = await attached.replay()
            await remote.close()
            return [message["content"] for message in replay.messages]

        assert asyncio.run(more()) == ["blocking", "async"]
    assert not any(thread.name == "rollout-in-process" for thread in threading.enumerate())
    with InProcessLedger(root) as again, again.client() as client:
        assert [m["content"] for m in client.session(session.id).replay().messages] == ["blocking", "async"]


def test_the_pairs_clients_reach_it_whatever_the_environment_names(monkeypatch, tmp_path) -> None:
    """ROLLOUT_TLS_CA and ROLLOUT_TOKEN name other services: the pair's clients stay plaintext."""
    monkeypatch.setenv("ROLLOUT_TLS_CA", str(tmp_path / "elsewhere-ca.pem"))
    monkeypatch.setenv("ROLLOUT_TOKEN", "for-another-service")
    with InProcessLedger(tmp_path / "ledger") as ledger, ledger.client() as client:
        assert client.create_session().append(user("plain")).seqs == (1,)

        async def through_async() -> int:
            remote = ledger.async_client()
            try:
                return (await remote.create_session()).next_seq or 0
            finally:
                await remote.close()

        assert asyncio.run(through_async()) == 1


def test_a_temporary_data_root_lives_as_long_as_the_pair() -> None:
    """Without a data root the pair serves a temporary folder, removed by close()."""
    ledger = InProcessLedger().start()
    try:
        assert (ledger.data_dir / "cluster.json").is_file()
        with ledger.client() as client:
            client.create_session().append(user("kept while running"))
    finally:
        ledger.close()
    assert not ledger.data_dir.exists()
    ledger.close()  # twice is harmless


def test_the_readme_in_process_example_runs(tmp_path) -> None:
    """The README's test of an agent against an in-process pair passes as printed."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The Python client: `rollout_client`", 1)[1].split("\n## ", 1)[0]
    (code,) = [
        block
        for block in re.findall(r"```python\n(.*?)```", section, re.DOTALL)
        if "InProcessLedger" in block
    ]
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    tests = [value for name, value in namespace.items() if name.startswith("test_") and callable(value)]
    assert len(tests) == 1
    tests[0](tmp_path)
