"""The README's agent example runs as printed against a live pair."""

from __future__ import annotations

import re

from tests.conftest import REPO


def _example() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The Python client: `rollout_client`", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the README's client section has no python example"
    return match.group(1)


def test_the_readme_agent_example_runs_and_prints_the_replay(
    writer_process, reader_process, monkeypatch, capsys
) -> None:
    """A parent delegating to two children, each stopped, the parent replayed: as the README says."""
    code = _example()
    assert len(code.strip().splitlines()) <= 20
    monkeypatch.setenv("ROLLOUT_WRITER", writer_process.address)
    monkeypatch.setenv("ROLLOUT_READER", reader_process.address)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "verified ['user', 'assistant', 'tool', 'tool', 'assistant']",
        "[('call_fix', 'coder'), ('call_review', 'reviewer')]",
    ]
