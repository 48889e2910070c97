"""A writer and a reader inside the calling process, for an agent's own tests (no service processes)::

    from rollout_client import user
    from rollout_client.in_process import InProcessLedger

    def test_the_agent_records_its_turn(tmp_path):
        with InProcessLedger(tmp_path / "ledger") as ledger, ledger.client() as client:
            session = client.create_session()
            session.append(user("hi"))
            assert session.replay().messages == [user("hi")]

:class:`InProcessLedger` serves one data root (a temporary folder removed on close, unless
given) with the writer and the reader of this installation, unchanged, on free loopback ports
in plaintext, from an event loop of its own in a daemon thread; so the blocking client and the
asyncio client (from any event loop) reach it as they reach services over the network. A
process holds one writer per data root (the writer's lock). Starting it tunes two process-wide
settings as the services do: glibc keeps large freed blocks mapped (``mallopt``), and the
interpreter's thread switch interval becomes 1 ms.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc

from reader_service.server import ReaderConfig, RunningReader, start_reader
from rollout_client._aio import AsyncRolloutClient
from rollout_client._appends import RetryPolicy
from rollout_client._channels import CHANNEL_OPTIONS
from rollout_client._sync import RolloutClient
from writer_service.server import RunningWriter, start_writer
from writer_service.sessions import WriterConfig

T = TypeVar("T")

#: Loopback, any free port.
_ADDRESS = "127.0.0.1:0"


def _plaintext(_service: str, address: str) -> grpc.aio.Channel:
    """The channels of the pair's clients (the ``channels=`` seam): plaintext, the clients' options."""
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


async def _cancel_the_rest() -> None:
    """End the loop's other tasks (the services' background work) before it stops."""
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


class InProcessLedger:
    """A writer and a reader of one data root, served in this process (see the module doc).

    ``data_dir``: the data root (None: a temporary folder, removed by :meth:`close`).
    ``writer_config`` / ``reader_config``: the services' settings (their ``data_dir`` is
    replaced by this one). :meth:`start` (or ``with``) starts both; :attr:`writer` and
    :attr:`reader` are their ``host:port``. Raises DataRootLockedError when another writer
    holds the data root.
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        writer_config: WriterConfig | None = None,
        reader_config: ReaderConfig | None = None,
    ) -> None:
        self._temporary = data_dir is None
        #: The data root (for a temporary one: set by :meth:`start`).
        self.data_dir = Path(data_dir) if data_dir is not None else Path()
        self._writer_config = writer_config
        self._reader_config = reader_config
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._writer: RunningWriter | None = None
        self._reader: RunningReader | None = None

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def start(self) -> Self:
        """Start the writer, then the reader; returns self. Starting twice is refused (RuntimeError)."""
        if self._loop is not None:
            raise RuntimeError("this InProcessLedger was started already")
        if self._temporary:
            self.data_dir = Path(tempfile.mkdtemp(prefix="rollout-ledger-"))
        writer_config = replace(self._writer_config or WriterConfig(self.data_dir), data_dir=self.data_dir)
        reader_config = replace(self._reader_config or ReaderConfig(self.data_dir), data_dir=self.data_dir)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rollout-in-process", daemon=True)
        self._thread.start()
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._writer = self._run(start_writer(writer_config, _ADDRESS))
            self._reader = self._run(start_reader(reader_config, _ADDRESS))
        except BaseException:
            self.close()
            raise
        return self

    @property
    def writer(self) -> str:
        """The writer's ``host:port`` (RuntimeError before :meth:`start`)."""
        if self._writer is None:
            raise RuntimeError("the InProcessLedger is not started")
        return self._writer.address

    @property
    def reader(self) -> str:
        """The reader's ``host:port`` (RuntimeError before :meth:`start`)."""
        if self._reader is None:
            raise RuntimeError("the InProcessLedger is not started")
        return self._reader.address

    def client(self, *, retry: RetryPolicy | None = None) -> RolloutClient:
        """A blocking client of the pair (the caller closes it); plaintext, no token, whatever
        ROLLOUT_TLS_CA / ROLLOUT_TOKEN say (they are for the services they name)."""
        return RolloutClient(self.writer, self.reader, retry=retry, channels=_plaintext)

    def async_client(self, *, retry: RetryPolicy | None = None) -> AsyncRolloutClient:
        """An asyncio client of the pair, usable from any event loop (the caller closes it);
        plaintext, no token, as :meth:`client`."""
        return AsyncRolloutClient(self.writer, self.reader, retry=retry, channels=_plaintext)

    def close(self) -> None:
        """Stop the reader and the writer (queued work drained, the data root's lock released),
        end the thread, and remove the data root if it was a temporary one. Safe to call twice."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return
        try:
            if self._reader is not None:
                self._run(self._reader.stop(grace=0))
            if self._writer is not None:
                self._run(self._writer.stop())
            self._run(_cancel_the_rest())
        finally:
            self._reader = self._writer = None
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            if self._temporary:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
