"""HTTP/1.1 to the API server on asyncio: a pool of keep-alive connections for
requests, and streamed answers for watches. httptools (the C parser uvicorn uses)
reads the answers; this module frames requests and manages connections.

Why not aiohttp, which the operator used before: one small PATCH cost about
270 µs of the client's CPU through aiohttp and about 75 µs here (one process,
uvloop, 32 at once against a local server), and a burst of 4,000 pods makes some
30,000 requests. What the API server does not need is left out: proxies,
redirects, compression, HTTP/2, ``Expect: 100-continue``.

Connections: at most ``size`` requests at once (a watch stream has a connection
of its own, not counted); idle connections are reused newest first and dropped
after ``IDLE_SECONDS``. A request whose reused connection turns out closed by the
server before any byte of the answer came is sent again once on a new connection
when repeating it is harmless (``GET``, ``PUT``, ``PATCH``, ``DELETE``: our
patches set values, they do not add to them); a ``POST`` then fails as any
unanswered request does (``OSError``), and its caller decides, since a create
may have been done.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, cast
from urllib.parse import urlsplit

import httptools

#: Idle connections older than this are closed rather than reused (servers close
#: theirs after a while; a request on one they closed would need sending again).
IDLE_SECONDS: Final = 30.0
#: Lines of a stream read ahead of its reader before the socket is paused.
STREAM_READ_AHEAD: Final = 1000
_REPEATABLE: Final = frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE"})
#: SO_LINGER on, 0 s: close() resets the connection and drops unsent data.
_RESET: Final = struct.pack("ii", 1, 0)


class ProtocolError(ConnectionError):
    """The server's answer was not HTTP/1.1 we could read, or the connection closed
    before the answer was whole."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    reason: str
    body: bytes


class _Connection(asyncio.Protocol):
    """One connection; one request at a time on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self.received = False  # any byte of the current answer
        self.reason = ""
        self.keep_alive = False
        self._body: list[bytes] = []
        self._answer: asyncio.Future[Answer] | None = None
        # Streaming (a watch): the head, then lines as they come.
        self._head: asyncio.Future[None] | None = None
        self._lines: collections.deque[bytes] | None = None
        self._partial = b""
        self._wake: asyncio.Future[None] | None = None
        self._ended = False
        self._paused = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have asyncio.Transport's methods without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"unreadable answer from the API server: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ProtocolError(f"connection closed before the answer was whole ({exc or 'EOF'})"))

    # httptools callbacks
    def on_status(self, status: bytes) -> None:
        self.reason = status.decode("latin-1")

    def on_headers_complete(self) -> None:
        if self._head is not None and not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self._lines is None:
            self._body.append(body)
            return
        data = self._partial + body if self._partial else body
        *lines, self._partial = data.split(b"\n")
        self._lines.extend(line for line in lines if line.strip())
        if len(self._lines) > STREAM_READ_AHEAD and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()
        self._wakeup()

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        if self._lines is not None:
            if self._partial.strip():
                self._lines.append(self._partial)
            self._partial = b""
            self._ended = True
            self._wakeup()
            return
        answer, self._answer = self._answer, None
        body, self._body = b"".join(self._body), []
        if answer is not None and not answer.done():
            answer.set_result(Answer(self.parser.get_status_code(), self.reason, body))

    # Use
    def send(self, data: bytes, answer: asyncio.Future[Answer]) -> None:
        assert self.transport is not None
        self.received = False
        self._answer = answer
        self.transport.write(data)

    def start_stream(self, data: bytes, head: asyncio.Future[None]) -> None:
        assert self.transport is not None
        self._head = head
        self._lines = collections.deque()
        self.transport.write(data)

    async def next_lines(self, idle_timeout: float) -> list[bytes]:
        """The lines that came since the last call (waiting up to ``idle_timeout`` for
        one); an empty list at the end of the stream."""
        assert self._lines is not None
        while not self._lines:
            if self._ended:
                return []
            if self.closed:
                raise ProtocolError("the stream's connection closed")
            self._wake = asyncio.get_running_loop().create_future()
            async with asyncio.timeout(idle_timeout):
                await self._wake
        lines = list(self._lines)
        self._lines.clear()
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return lines

    def status(self) -> int:
        return self.parser.get_status_code()

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _fail(self, exc: Exception) -> None:
        for waiter in (self._answer, self._head):
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)
        self._answer = None
        if self._wake is not None and not self._wake.done():
            self._wake.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Reset the connection (RST): what the kernel still holds of a request is
        dropped, not sent again. A plain close (FIN) lets the kernel go on sending it,
        so a write held by a partition could reach the server long after we gave it
        up (and another replica took over)."""
        self.closed = True
        if self.transport is None:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self.transport.abort()


class HttpPool:
    """Requests to one server (``url``: scheme, host and port), ``size`` at once."""

    def __init__(
        self, url: str, *, ssl_context: ssl.SSLContext | None = None, size: int = 64
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"API server URL {url!r}: expected http(s)://host[:port]")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl_context if parts.scheme == "https" else None
        if parts.scheme == "https" and self.ssl is None:
            self.ssl = ssl.create_default_context()
        self.authority = parts.netloc.rsplit("@", 1)[-1]
        self.prefix = parts.path.rstrip("/")  # a server behind a path (rare, allowed)
        self.size = size
        self._slots = asyncio.Semaphore(size)
        self._idle: list[_Connection] = []
        self._streams: set[_Connection] = set()
        #: Connections with a write in flight (``abort_writes``).
        self._writing: set[_Connection] = set()
        self.closed = False
        self.opened = 0  # connections opened so far (tests, metrics)

    def _head(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None
    ) -> bytes:
        lines = [f"{method} {self.prefix}{target} HTTP/1.1", f"Host: {self.authority}"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise ValueError(f"HTTP header {name}: a line break in its value")
            lines.append(f"{name}: {value}")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")

    async def _open(self) -> _Connection:
        if self.closed:
            raise ConnectionError("the HTTP pool is closed (the part stopped)")
        _, conn = await asyncio.get_running_loop().create_connection(
            _Connection,
            self.host,
            self.port,
            ssl=self.ssl,
            server_hostname=self.host if self.ssl is not None else None,
        )
        self.opened += 1
        return conn

    def _reuse(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.close()
        return None

    async def request(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None = None,
        *,
        timeout: float = 10.0,
        check: Callable[[], None] | None = None,
    ) -> Answer:
        """One request (``target``: path and query); ``TimeoutError`` or ``OSError``
        when no whole answer came. ``check`` is called right before each time the
        request is written to a connection (after waiting for a free one), and may
        raise to keep it from being sent (a leader's fence)."""
        data = self._head(method, target, headers, body)
        loop = asyncio.get_running_loop()
        async with self._slots, asyncio.timeout(timeout):
            conn = self._reuse()
            for attempt in (1, 2):
                reused = conn is not None
                if conn is None:
                    conn = await self._open()
                answer: asyncio.Future[Answer] = loop.create_future()
                writing = method not in ("GET", "HEAD")
                if check is not None:
                    try:
                        check()
                    except BaseException:  # refused: nothing was sent on it
                        conn.idle_since = time.monotonic()
                        self._idle.append(conn)
                        raise
                try:
                    if writing:
                        self._writing.add(conn)
                    conn.send(data, answer)
                    result = await answer
                except ProtocolError:
                    conn.close()
                    self._writing.discard(conn)
                    if attempt == 1 and reused and not conn.received and method in _REPEATABLE:
                        conn = None  # the server had closed it: once more, on a new one
                        continue
                    raise
                except BaseException:  # timeout, cancel: the answer may still come
                    conn.abort()
                    self._writing.discard(conn)
                    raise
                self._writing.discard(conn)
                if conn.keep_alive and not conn.closed and not self.closed:
                    conn.idle_since = time.monotonic()
                    self._idle.append(conn)
                else:
                    conn.close()
                return result
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def stream(
        self,
        target: str,
        headers: dict[str, str],
        *,
        connect_timeout: float = 10.0,
        idle_timeout: float = 90.0,
    ) -> AsyncIterator[tuple[int, str, AsyncIterator[list[bytes]]]]:
        """A GET whose answer is read as it comes: ``(status, reason, batches)``, each
        batch the non-blank lines that came together; a stream silent for
        ``idle_timeout`` raises ``TimeoutError``. For a status other than 200, the
        batches hold the answer's body."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(connect_timeout):
            conn = await self._open()
        self._streams.add(conn)
        try:
            head: asyncio.Future[None] = loop.create_future()
            conn.start_stream(self._head("GET", target, headers, None), head)
            async with asyncio.timeout(connect_timeout):
                await head

            async def batches() -> AsyncIterator[list[bytes]]:
                while lines := await conn.next_lines(idle_timeout):
                    yield lines

            yield conn.status(), conn.reason, batches()
        finally:
            self._streams.discard(conn)
            conn.close()

    def abort_writes(self) -> int:
        """Reset every connection with a write in flight (this process stopped leading:
        what the network still holds of them must not reach the server later); their
        requests fail (``ProtocolError``). Returns how many."""
        writing = list(self._writing)
        for conn in writing:
            conn.abort()
        return len(writing)

    async def close(self) -> None:
        self.closed = True
        for conn in [*self._idle, *self._streams]:
            conn.close()
        self._idle.clear()
