"""Pluggable extractors: what turns a session's messages into candidate artifacts.

An extractor takes a request (a JSON object) and returns a JSON object; the pipeline
checks everything it returns against the sources (rollout_memory.pipeline). Two tasks:

``extract`` (phase 1, one session up to one stop)::

    request:  {"task": "extract", "prompt_version": "memory-extract/v1", "session_id": "…",
               "scope": {…}, "messages": [{"seq": 3, "role": "user", "text": "…"}, …],
               "memories": [{"artifact_id": "mem_…", "text": "…"}, …]}   (the scope's current ones)
    result:   {"summary": {"text": "…", "cites": [3, 5]},
               "memories": [{"text": "…", "cites": [5],
                             "supersedes": [{"artifact_id": "mem_…", "evidence_seq": 5}]}]}

``consolidate`` (phase 2, one scope)::

    request:  {"task": "consolidate", "prompt_version": "memory-consolidate/v1", "scope": {…},
               "memories": [{"artifact_id": "mem_…", "text": "…"}, …]}
    result:   {"memories": [{"text": "…", "from": ["mem_…", "mem_…"]}]}

Any other key of a result (a ``said_by``, a ``kind``, a ``source``) is ignored: who said
what is read from the records, never from the model.

Two implementations: :class:`ChatCompletionsExtractor` (an OpenAI-compatible
chat-completions endpoint through the ``openai`` package: base URL, model, key) and
:class:`CommandExtractor` (a local command: the request on stdin, the result on stdout).
Both raise :class:`ExtractorError` for a failure worth retrying.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import orjson

#: Prompt versions (stamped on every artifact as its generator's).
EXTRACT_PROMPT_VERSION = "memory-extract/v1"
CONSOLIDATE_PROMPT_VERSION = "memory-consolidate/v1"

EXTRACT_PROMPT = """You distill reusable facts from an agent session for later sessions.
You receive a JSON object: the session's messages (each with its seq) and the facts already
known for this scope. Answer with one JSON object:
{"summary": {"text": str, "cites": [seq, ...]},
 "memories": [{"text": str, "cites": [seq, ...],
               "supersedes": [{"artifact_id": str, "evidence_seq": seq}]}]}
Cite the seqs of the messages each item rests on. List a known fact under "supersedes" only
when a cited message contradicts or updates it, and name that message's seq as evidence."""

CONSOLIDATE_PROMPT = """You consolidate the facts known for one scope. You receive a JSON
object with the facts (each with its artifact_id). Answer with one JSON object:
{"memories": [{"text": str, "from": [artifact_id, ...]}]}
where each memory merges the facts listed in "from" (two or more). Leave out facts you do
not merge."""


class ExtractorError(Exception):
    """The extractor failed (unreachable, refused, timed out, or answered no JSON object);
    the pipeline retries with backoff."""


class Extractor(Protocol):
    """What the pipeline calls: one request object in, one result object out."""

    @property
    def model(self) -> str: ...

    def run(self, request: Mapping[str, Any]) -> dict[str, Any]: ...


def _result_object(text: str | bytes, where: str) -> dict[str, Any]:
    try:
        result = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ExtractorError(f"{where} answered no JSON: {exc}") from exc
    if not isinstance(result, dict):
        raise ExtractorError(f"{where} answered JSON that is not an object")
    return result


class ChatCompletionsExtractor:
    """An OpenAI-compatible chat-completions endpoint (``openai`` package): the system prompt
    of the task, the request as the user message, a JSON object asked for as the answer.
    ``timeout`` in seconds; the client's own retries are off (the pipeline retries). Raises
    ExtractorError when the ``openai`` package (the ``memory`` extra) is not installed."""

    def __init__(self, base_url: str, model: str, api_key: str, *, timeout: float = 120.0) -> None:
        try:
            import openai  # the `memory` extra
        except ImportError as exc:
            raise ExtractorError(
                "the chat-completions extractor needs the openai package: pip install 'rollout-ledger[memory]'"
            ) from exc

        self._openai = openai
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)
        self._model = model

    @property
    def model(self) -> str:
        return self._model

    def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        prompt = EXTRACT_PROMPT if request.get("task") == "extract" else CONSOLIDATE_PROMPT
        try:
            completion = self._client.chat.completions.create(
                model=self._model,
                messages=[
                    {"role": "system", "content": prompt},
                    {"role": "user", "content": orjson.dumps(request).decode()},
                ],
                response_format={"type": "json_object"},
            )
        except self._openai.OpenAIError as exc:
            raise ExtractorError(f"the chat-completions endpoint failed: {exc}") from exc
        if not completion.choices or completion.choices[0].message.content is None:
            raise ExtractorError("the chat-completions endpoint answered no message content")
        return _result_object(completion.choices[0].message.content, "the chat-completions endpoint")


class CommandExtractor:
    """A local command: the request (JSON) on its stdin, the result (JSON) on its stdout; a
    non-zero exit or a timeout (seconds) is an ExtractorError."""

    def __init__(self, argv: Sequence[str], *, model: str = "command", timeout: float = 600.0) -> None:
        self._argv = list(argv)
        self._model = model
        self._timeout = timeout

    @property
    def model(self) -> str:
        return self._model

    def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        try:
            done = subprocess.run(
                self._argv,
                input=orjson.dumps(request),
                capture_output=True,
                timeout=self._timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ExtractorError(f"the extractor command {self._argv[0]!r} failed: {exc}") from exc
        if done.returncode != 0:
            raise ExtractorError(
                f"the extractor command exited with {done.returncode}: {done.stderr.decode(errors='replace')[-500:]}"
            )
        return _result_object(done.stdout, f"the extractor command {self._argv[0]!r}")
