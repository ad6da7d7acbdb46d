"""Host ports, as kube-scheduler's NodePorts: two pods asking for one port of a node
cannot both run there.

A port is (protocol, hostIP, port); an empty hostIP is 0.0.0.0, which takes the
port on every address of the node, so it clashes with the same protocol and port
on any address. Every pod the session has on the node counts (running, releasing:
it holds the port until it is gone, placed or pipelined this cycle).
"""

from __future__ import annotations

from kai_py.scheduler.model import Node, Task

ANY_IP = "0.0.0.0"


def clash(a: tuple[str, str, int], b: tuple[str, str, int]) -> bool:
    return a[0] == b[0] and a[2] == b[2] and (a[1] == b[1] or ANY_IP in (a[1], b[1]))


def conflict(task: Task, node: Node) -> str | None:
    """Why ``task`` cannot have its host ports on ``node``, or None."""
    for other in node.tasks.values():
        if not other.host_ports or other.key == task.key:
            continue
        for mine in task.host_ports:
            for theirs in other.host_ports:
                if clash(mine, theirs):
                    protocol, ip, port = mine
                    at = "" if ip == ANY_IP else f" on {ip}"
                    return (
                        f"node(s) didn't have free ports for the requested pod ports "
                        f"(hostPort {port}/{protocol}{at} is taken)"
                    )
    return None
