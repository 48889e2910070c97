"""How the client reaches a service: a channel per event loop, a prompt reconnect, and what a
failed connection says about an attempt.

* **Channels**: one per event loop the client is used from (a grpc.aio channel belongs to the
  loop it was opened on), opened on the first call there and closed by the client's
  ``close()``; a loop that has closed drops its channels. They are opened by
  :func:`rollout_client._channels.open_channel`, or by the ``channels`` opener the client was
  given (the transport seam: ``opener(service, address)`` returns a grpc.aio channel).
* **Reconnecting**: gRPC tries a lost connection again after 0.1 s, the wait growing to at most
  0.25 s (``CHANNEL_OPTIONS``), so a service that comes back is connected to within ~0.3 s.
* **Before an attempt**: a service that has answered since the client was created but has no
  connection now (restarting) is waited for, nothing sent, until a connection is made or the
  call's deadline passes; then UnavailableError says nothing of the call was sent. A service
  that never answered is not waited for: the attempt goes out, and when it is refused at
  connect (:func:`refused_at_connect`: nothing was sent) UnavailableError names the address
  at once ("is it running at …?"), whatever the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import grpc

from rollout_client._errors import ClientClosedError, UnavailableError
from rollout_client._loops import PerLoop

StubT = TypeVar("StubT")

#: The transport seam: ``opener(service, address)`` ("writer" or "reader", the address the client
#: was given) returns a grpc.aio channel, opened in that call (so on the running loop); the
#: client calls it once per event loop it is used from and closes what it returns.
ChannelOpener = Callable[[str, str], grpc.aio.Channel]

#: How gRPC words the failure of an attempt that found no connection (no address connected, or
#: the name did not resolve): the attempt was never sent.
_REFUSED_AT_CONNECT = ("failed to connect to all addresses", "errors resolving", "DNS resolution failed")


def refused_at_connect(error: grpc.aio.AioRpcError) -> bool:
    """Whether ``error`` is gRPC's refusal of an attempt that no connection could carry
    (UNAVAILABLE, "failed to connect to all addresses" or a name that did not resolve): nothing
    of the attempt was sent."""
    return error.code() is grpc.StatusCode.UNAVAILABLE and (error.details() or "").startswith(
        _REFUSED_AT_CONNECT
    )


class UnreachedError(Exception):
    """An attempt that was not sent, and will not be: no connection to the service (see the module
    doc). ``error`` is the UnavailableError to raise."""

    def __init__(self, error: UnavailableError | ClientClosedError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class _Opened(Generic[StubT]):
    """A channel opened on one event loop, its stub and the stub's method objects."""

    channel: grpc.aio.Channel
    stub: StubT
    methods: tuple[object, ...]


#: Closes running on other loops (kept until done: the loop holds tasks weakly).
_closing: set[asyncio.Task[None]] = set()


def _close_soon(channel: grpc.aio.Channel) -> None:
    """On the channel's own loop: close it in a task of that loop."""
    task = asyncio.ensure_future(channel.close())
    _closing.add(task)
    task.add_done_callback(_closing.discard)


class ServiceConnection(Generic[StubT]):
    """One service of a client (``service`` "writer" or "reader" at ``address``): its channel and
    stub on each event loop, and whether it has answered since the client was created."""

    def __init__(
        self,
        service: str,
        address: str,
        open_channel: Callable[[], grpc.aio.Channel],
        make_stub: Callable[[grpc.aio.Channel], StubT],
    ) -> None:
        self.service = service
        self.address = address
        #: Set once the service has been connected to (or answered a call).
        self.answered = False
        #: Set by :meth:`close`: no channel is opened again, every later call raises ClientClosedError.
        self.closed = False
        self._open_channel = open_channel
        self._make_stub = make_stub
        self._opened: PerLoop[_Opened[StubT]] = PerLoop(self._open_here)

    def _open_here(self) -> _Opened[StubT]:
        if self.closed:
            raise ClientClosedError("the client is closed")
        channel = self._open_channel()
        stub = self._make_stub(channel)
        return _Opened(channel, stub, tuple(vars(stub).values()))

    @property
    def stub(self) -> StubT:
        """The stub on the running loop's channel (opened now if the loop has none)."""
        return self._opened.get().stub

    def ready(self) -> bool:
        """Whether the running loop's channel is open and connected now (no wait, no connect begun)."""
        opened = None if self.closed else self._opened.current()
        return opened is not None and opened.channel.get_state() is grpc.ChannelConnectivity.READY

    def serves(self, method: object) -> bool:
        """Whether ``method`` is one of the running loop's stub methods of this service."""
        opened = self._opened.current()
        return opened is not None and any(method is own for own in opened.methods)

    async def reached(self, seconds: float) -> None:
        """Return once the running loop's channel is connected, waiting up to ``seconds`` if the
        service answered before; at once if it never answered (the attempt shows whether it can
        connect). Raises :class:`UnreachedError` when ``seconds`` pass without a connection, and
        with ClientClosedError when the channel was closed meanwhile; ClientClosedError itself
        after :meth:`close`."""
        if self.closed:
            raise ClientClosedError("the client is closed")
        channel = self._opened.get().channel
        state = channel.get_state(try_to_connect=True)
        if state is grpc.ChannelConnectivity.READY:
            self.answered = True
            return
        if not self.answered:
            return
        try:
            async with asyncio.timeout(max(seconds, 0.0)):
                while state is not grpc.ChannelConnectivity.READY:
                    if state is grpc.ChannelConnectivity.SHUTDOWN:
                        raise UnreachedError(
                            ClientClosedError("the client was closed before this call completed")
                        )
                    await channel.wait_for_state_change(state)
                    state = channel.get_state(try_to_connect=True)
        except TimeoutError:
            raise UnreachedError(self.gone()) from None

    def gone(self) -> UnavailableError:
        """The error of a call that found no connection to a service that answered before."""
        return UnavailableError(
            f"the {self.service} at {self.address} accepted no connection before the call's deadline"
            f" (it answered before: is it running at {self.address}?); nothing of this call was sent",
            code=grpc.StatusCode.UNAVAILABLE,
        )

    def failed(self, error: grpc.aio.AioRpcError) -> None:
        """Take note of an attempt that failed with ``error``. Raises :class:`UnreachedError` when it was
        refused at connect by a service that never answered (fail fast: nothing to wait for)."""
        if not refused_at_connect(error):
            self.answered = True  # a status from the service, or a connection that broke
        elif not self.answered:
            raise UnreachedError(
                UnavailableError(
                    f"cannot connect to the {self.service} at {self.address}: is it running at"
                    f" {self.address}? Nothing has answered there since this client was created"
                    f" ({error.details()})",
                    code=grpc.StatusCode.UNAVAILABLE,
                )
            )

    async def close(self) -> None:
        """Close the channel of every loop: the running loop's now, a loop running in another
        thread's soon on that loop; a stopped or closed loop's channel is released when dropped.
        No channel is opened after it (ClientClosedError)."""
        self.closed = True
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, opened in self._opened.take_all():
            if loop is running:
                await opened.channel.close()
            elif loop.is_running():
                with contextlib.suppress(RuntimeError):  # it closed meanwhile
                    loop.call_soon_threadsafe(_close_soon, opened.channel)
