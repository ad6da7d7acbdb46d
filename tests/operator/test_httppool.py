"""The operator's HTTP/1.1 client (kai_py.apiclient.httppool) against local servers:
keep-alive reuse, streamed answers, timeouts, and connections the server closes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from kai_py.apiclient.httppool import HttpPool, ProtocolError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def _pool_on(handler: Handler, size: int = 64) -> AsyncIterator[HttpPool]:
    """A pool of ``size`` to a local aiohttp server answering with ``handler``."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    pool = HttpPool(f"http://127.0.0.1:{port}", size=size)
    try:
        yield pool
    finally:
        await pool.close()
        await runner.cleanup()


def test_requests_reuse_one_connection_and_carry_method_body_and_headers() -> None:
    seen: list[tuple[str, str, bytes, str | None]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(
            (request.method, request.path_qs, await request.read(), request.headers.get("X-Who"))
        )
        return web.Response(status=201, reason="Made", body=b'{"ok":true}')

    async def main() -> None:
        async with _pool_on(handler, size=4) as pool:
            for i in range(5):
                answer = await pool.request(
                    "PATCH", f"/a/{i}?x=1", {"X-Who": "me"}, b'{"n":%d}' % i
                )
                assert (answer.status, answer.reason, answer.body) == (201, "Made", b'{"ok":true}')
            assert pool.opened == 1  # one keep-alive connection for requests one after another
            assert seen[0] == ("PATCH", "/a/0?x=1", b'{"n":0}', "me")
            assert [s[1] for s in seen] == [f"/a/{i}?x=1" for i in range(5)]

    asyncio.run(main())


def test_at_most_size_requests_at_once() -> None:
    running = 0
    most = 0

    async def handler(request: web.Request) -> web.Response:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.02)
        running -= 1
        return web.Response(body=b"{}")

    async def main() -> None:
        async with _pool_on(handler, size=3) as pool:
            answers = await asyncio.gather(*(pool.request("GET", "/", {}) for _ in range(12)))
            assert all(a.status == 200 for a in answers)
            assert most == 3 and pool.opened == 3

    asyncio.run(main())


def test_a_request_without_answer_times_out_and_its_connection_is_not_reused() -> None:
    async def handler(request: web.Request) -> web.Response:
        if request.path == "/slow":
            await asyncio.sleep(5)
        return web.Response(body=b"{}")

    async def main() -> None:
        async with _pool_on(handler, size=2) as pool:
            with pytest.raises(TimeoutError):
                await pool.request("GET", "/slow", {}, timeout=0.2)
            # The late answer must not be taken for the next request's.
            assert (await pool.request("GET", "/fast", {})).status == 200
            assert pool.opened == 2

    asyncio.run(main())


@asynccontextmanager
async def _pool_on_raw(
    on_connection: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    size: int = 64,
) -> AsyncIterator[HttpPool]:
    """A pool of ``size`` to a local server that speaks bytes as ``on_connection`` does."""
    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = HttpPool(f"http://127.0.0.1:{port}", size=size)
    try:
        yield pool
    finally:
        await pool.close()
        server.close()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return head


def _drops_second_request() -> tuple[
    Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]], list[bytes]
]:
    """A server whose first connection answers one request, then closes when the next
    comes (as one whose idle timeout ran out just as the client reused the connection);
    later connections answer everything."""
    heads: list[bytes] = []
    connections = 0

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        first = connections == 1
        try:
            while True:
                heads.append(await _read_request(reader))
                if first and len(heads) == 2:
                    break
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    return on_connection, heads


@pytest.mark.parametrize(("method", "repeated"), [("PATCH", True), ("GET", True), ("POST", False)])
def test_a_reused_connection_the_server_closed_is_repeated_only_when_harmless(
    method: str, repeated: bool
) -> None:
    on_connection, heads = _drops_second_request()

    async def main() -> None:
        async with _pool_on_raw(on_connection, size=1) as pool:
            assert (await pool.request(method, "/first", {}, b"{}")).status == 200
            if repeated:
                assert (await pool.request(method, "/second", {}, b"{}")).status == 200
                assert len(heads) == 3 and pool.opened == 2
            else:
                with pytest.raises(ProtocolError):
                    await pool.request(method, "/second", {}, b"{}")
                assert len(heads) == 2  # a create is never sent twice by the pool

    asyncio.run(main())


def test_a_stream_yields_lines_split_anywhere_and_ends_with_the_answer() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for piece in (b'{"a":1}\n{"b"', b":2}\n", b"\n", b'{"c":3}'):
            await response.write(piece)
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    async def main() -> None:
        async with _pool_on(handler) as pool:
            async with pool.stream("/watch", {}) as (status, _reason, batches):
                assert status == 200
                lines = [line async for batch in batches for line in batch]
            assert lines == [b'{"a":1}', b'{"b":2}', b'{"c":3}']

    asyncio.run(main())


async def _lines_until(error: type[Exception], pool: HttpPool, **stream: float) -> list[bytes]:
    """The lines a watch stream gave before it raised ``error`` (which it must)."""
    got: list[bytes] = []
    with pytest.raises(error):
        async with pool.stream("/watch", {}, **stream) as (_s, _r, batches):
            async for batch in batches:
                got.extend(batch)
    return got


def test_a_silent_stream_times_out() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b'{"a":1}\n')
        await asyncio.sleep(5)
        return response

    async def main() -> None:
        async with _pool_on(handler) as pool:
            assert await _lines_until(TimeoutError, pool, idle_timeout=0.3) == [b'{"a":1}']

    asyncio.run(main())


def test_a_stream_cut_short_raises_after_the_lines_that_came() -> None:
    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n{\"a\":1}\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()  # no last chunk: the stream broke

    async def main() -> None:
        async with _pool_on_raw(on_connection) as pool:
            assert await _lines_until(ProtocolError, pool) == [b'{"a":1}']

    asyncio.run(main())


def test_no_server_and_garbage_answers_are_connection_errors() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"SPDY/9 what\r\n\r\n")
        await writer.drain()

    async def main() -> None:
        async with _pool_on_raw(garbage) as pool:
            with pytest.raises(ProtocolError):
                await pool.request("GET", "/", {})
            url = f"http://{pool.host}:{pool.port}"
        closed = HttpPool(url)  # the server is gone now
        with pytest.raises(OSError):
            await closed.request("GET", "/", {}, timeout=2.0)

    asyncio.run(main())


def test_bad_urls_and_header_values_are_refused_with_their_value() -> None:
    with pytest.raises(ValueError, match="ftp://x"):
        HttpPool("ftp://x")

    async def main() -> None:
        pool = HttpPool("http://127.0.0.1:9")
        with pytest.raises(ValueError, match="Authorization"):
            await pool.request("GET", "/", {"Authorization": "Bearer a\r\nX: y"})

    asyncio.run(main())


def test_writes_given_up_are_reset_not_closed_and_a_refused_check_sends_nothing() -> None:
    """A write in flight reset by ``abort_writes`` (the leader lost the Lease) or given
    up on its timeout ends with a reset the server sees (ECONNRESET), not an
    end of stream after which a kernel may still deliver what a partition held; a
    GET in flight is left alone; a request whose ``check`` raises is never sent."""
    ends: list[str] = []
    heads: list[bytes] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            heads.append(await _read_request(reader))
            if heads[-1].startswith(b"GET"):
                await asyncio.sleep(0.5)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
            await reader.read()  # never answers a write: waits for the client's end
            ends.append("closed")
        except ConnectionResetError:
            ends.append("reset")
        writer.close()

    def refuse() -> None:
        raise PermissionError("not leading")

    async def main() -> None:
        async with _pool_on_raw(on_connection) as pool:
            get = asyncio.create_task(pool.request("GET", "/a", {}))
            write = asyncio.create_task(pool.request("POST", "/b", {}, b"{}"))
            await asyncio.sleep(0.2)
            assert pool.abort_writes() == 1
            with pytest.raises(ProtocolError):
                await write
            assert (await get).status == 200
            with pytest.raises(TimeoutError):
                await pool.request("PATCH", "/c", {}, b"{}", timeout=0.2)
            with pytest.raises(PermissionError):
                await pool.request("DELETE", "/d", {}, check=refuse)
            await asyncio.sleep(0.2)

    asyncio.run(main())
    assert not any(h.startswith(b"DELETE") for h in heads)
    assert ends.count("reset") == 2, ends
