"""A TCP relay between a client under test and one etcd member, run in the test's event loop.

The test can hold the bytes going either way (a partition between the client and etcd,
with etcd itself running on) and release them, and delay what the member sends back (a
slow answer: the client learns of a renewal later than etcd made it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time


class TcpRelay:
    """Relays connections to ``127.0.0.1:target_port``; ``reply_delay``: seconds each chunk
    from the target is held before the client gets it."""

    def __init__(self, target_port: int, *, reply_delay: float = 0.0) -> None:
        self.target_port = target_port
        self.reply_delay = reply_delay
        self._requests_flow = asyncio.Event()
        self._replies_flow = asyncio.Event()
        self.release()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def endpoint(self) -> str:
        """The relay's address, ``127.0.0.1:PORT``."""
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)

    def hold(self, *, replies: bool = True) -> None:
        """Stop forwarding what the client sends, and (``replies``) what the target sends
        back; the bytes are kept, in order."""
        self._requests_flow.clear()
        if replies:
            self._replies_flow.clear()

    def release(self) -> None:
        """Forward again both ways, the kept bytes first."""
        self._requests_flow.set()
        self._replies_flow.set()

    async def close(self) -> None:
        """Close the listener and every relayed connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)
        for writer in list(self._writers):
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self._writers.add(client_writer)
        try:
            target_reader, target_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        self._writers.add(target_writer)
        pumps = [
            asyncio.create_task(self._pump(client_reader, target_writer, 0.0, self._requests_flow)),
            asyncio.create_task(
                self._pump(target_reader, client_writer, self.reply_delay, self._replies_flow)
            ),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.wait(pumps)
            self._tasks.difference_update(pumps)
            for writer in (client_writer, target_writer):
                writer.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, flowing: asyncio.Event
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def forward() -> None:
            while True:
                arrived, chunk = await queue.get()
                wait = arrived + delay - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await flowing.wait()
                writer.write(chunk)
                await writer.drain()

        forwarding = asyncio.create_task(forward())
        try:
            while chunk := await reader.read(65536):
                queue.put_nowait((time.monotonic(), chunk))
            while not queue.empty() and not forwarding.done():
                await asyncio.sleep(0.01)
        except OSError:
            pass
        finally:
            forwarding.cancel()
            await asyncio.wait([forwarding])
