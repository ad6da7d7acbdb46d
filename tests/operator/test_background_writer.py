"""The background lanes: writes under one key replace each other while queued, and a
write that says what the one being sent says is not sent again."""

from __future__ import annotations

import asyncio
from typing import Any

from kai_py.writes.writer import STATUS, BackgroundWriter, Write

Json = dict[str, Any]


class GatedKube:
    """Answers each request once ``gate`` is open, and records what was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Json | None]] = []
        self.gate = asyncio.Event()

    async def arequest(
        self, method: str, path: str, body: Any = None, *, content_type: str = "", query: Any = None
    ) -> Json:
        self.sent.append((path, body))
        await self.gate.wait()
        return {"metadata": {"name": path.rsplit("/", 2)[-2]}}


def _status(name: str, phase: str) -> Write:
    return Write(
        f"PodGroup ns/{name} status",
        "PATCH",
        f"/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/{name}/status",
        {"status": {"phase": phase}},
        lane=STATUS,
        key=f"podgroup-status ns/{name}",
    )


async def _sent_after(*rounds: list[Write]) -> list[tuple[str, Json | None]]:
    """Submit each round while the first write is still being sent, then let all land."""
    kube = GatedKube()
    writer = BackgroundWriter(kube, concurrency=1)  # type: ignore[arg-type]
    for writes in rounds:
        writer.submit(writes)
        await asyncio.sleep(0.01)  # the worker takes the first write and waits on it
    kube.gate.set()
    await writer.drain(5.0)
    await writer.close()
    assert writer.outcome.failed == 0
    return [(path.rsplit("/", 2)[-2], body) for path, body in kube.sent]


def test_the_same_status_planned_again_while_it_is_sent_is_sent_once() -> None:
    sent = asyncio.run(_sent_after([_status("a", "Running")], [_status("a", "Running")]))
    assert sent == [("a", {"status": {"phase": "Running"}})]


def test_a_different_status_planned_while_one_is_sent_follows_it() -> None:
    sent = asyncio.run(_sent_after([_status("a", "Pending")], [_status("a", "Running")]))
    assert [body for _, body in sent] == [
        {"status": {"phase": "Pending"}},
        {"status": {"phase": "Running"}},
    ]


def test_what_is_being_sent_planned_again_drops_an_older_queued_change() -> None:
    """Sent: Running; queued since: Pending; planned now: Running again. The newest is
    what is being sent, so the queued Pending must not land after it."""
    sent = asyncio.run(
        _sent_after(
            [_status("a", "Running"), _status("b", "Pending")],
            [_status("a", "Pending")],
            [_status("a", "Running")],
        )
    )
    assert sent == [
        ("a", {"status": {"phase": "Running"}}),
        ("b", {"status": {"phase": "Pending"}}),
    ]
