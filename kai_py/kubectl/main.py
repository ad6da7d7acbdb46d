"""``kubectl-kai``: the kubectl plugin's commands, reading the live cluster.

kubectl runs ``kubectl-kai`` (installed with kai-py) for ``kubectl kai ...`` and hands
it every argument after ``kai``; the kubeconfig and context are the user's
(``--kubeconfig``, ``--context``, ``$KUBECONFIG``), as kubectl takes them, through the
operator's own API client. It only reads: GETs and LISTs, never a write.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from kai_py.api import keys
from kai_py.apiclient.kube import (
    Kube,
    KubeError,
    kubeconfig_namespace,
    list_all,
    load_api_client,
    path_of,
)
from kai_py.kubectl.cards import NodeCards, cards, cards_table
from kai_py.kubectl.views import WhyInput, queue_rows, queues_table, why, why_text

Json = dict[str, Any]


def _common(parser: argparse.ArgumentParser, default: Any) -> None:
    """kubectl's own flags, taken before the subcommand (as kubectl passes them) or after."""
    parser.add_argument("--kubeconfig", default=default, help="kubeconfig file to use")
    parser.add_argument("--context", default=default, help="kubeconfig context to use")
    parser.add_argument(
        "-n", "--namespace", default=default, help="namespace (default: the context's)"
    )
    parser.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        default=False if default is None else default,
        help="every namespace (queues: the default)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text" if default is None else default,
        help="text (a table within 120 columns) or json",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kubectl kai",
        description="kai-py's view of the cluster: why a pod waits, the queues, the GPU cards.",
    )
    _common(top, None)
    sub = top.add_subparsers(dest="command", required=True)
    w = sub.add_parser("why", help="why a pod is not running: reason, gang, queue, place in line")
    w.add_argument("pod", help="POD or pod/POD")
    q = sub.add_parser(
        "queues", help="the queue tree: quota, limit, fair share, allocated, pending"
    )
    q.add_argument(
        "-r",
        "--resource",
        choices=("gpu", "cpu", "memory"),
        default="gpu",
        help="the resource the table shows (json has all)",
    )
    c = sub.add_parser("cards", help="each GPU card: who holds what share, reservation pods, pins")
    c.add_argument("node", nargs="?", help="only this node")
    for each in (w, q, c):
        _common(each, argparse.SUPPRESS)
    return top


class Cluster:
    """The reads the commands make; None (or []) where the user may not read."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def get(self, path: str) -> Json | None:
        try:
            return self.kube.get(path)
        except KubeError as exc:
            if exc.code == 404:
                return None
            raise

    def list(self, path: str, *, forbidden_ok: bool = False) -> list[Json] | None:
        try:
            return list(list_all(self.kube, path).get("items") or [])
        except KubeError as exc:
            if forbidden_ok and exc.code in (401, 403):
                return None
            raise


def _queues(cluster: Cluster, *, forbidden_ok: bool) -> list[Json] | None:
    return cluster.list(
        path_of(keys.GROUP, keys.QUEUE_VERSION, "queues"), forbidden_ok=forbidden_ok
    )


def _podgroups(cluster: Cluster, namespace: str | None) -> list[Json] | None:
    return cluster.list(
        path_of(keys.GROUP, keys.PODGROUP_VERSION, "podgroups", namespace), forbidden_ok=True
    )


def run_why(cluster: Cluster, namespace: str, name: str) -> Json:
    name = name.split("/", 1)[1] if name.startswith(("pod/", "pods/")) else name
    pod = cluster.get(path_of("", "v1", "pods", namespace, name))
    if pod is None:
        raise LookupError(f"pod {namespace}/{name} not found")
    group = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.POD_GROUP_ANNOTATION)
    podgroup = (
        cluster.get(path_of(keys.GROUP, keys.PODGROUP_VERSION, "podgroups", namespace, group))
        if group
        else None
    )
    in_namespace = cluster.list(path_of("", "v1", "pods", namespace)) or []
    members = [
        p
        for p in in_namespace
        if group
        and ((p.get("metadata") or {}).get("annotations") or {}).get(keys.POD_GROUP_ANNOTATION)
        == group
    ]
    about = {("Pod", name), ("PodGroup", str(group))}
    events = [
        e
        for e in cluster.list(path_of("", "v1", "events", namespace), forbidden_ok=True) or []
        if (
            (e.get("involvedObject") or {}).get("kind"),
            (e.get("involvedObject") or {}).get("name"),
        )
        in about
    ]
    return why(
        WhyInput(
            pod=pod,
            podgroup=podgroup,
            group_pods=members,
            queues=_queues(cluster, forbidden_ok=True),
            events=events,
            nodes=cluster.list(path_of("", "v1", "nodes"), forbidden_ok=True),
            all_pods=cluster.list(path_of("", "v1", "pods"), forbidden_ok=True),
        )
    )


def run_queues(cluster: Cluster, namespace: str | None, own: str) -> list[Json]:
    """The tree; PodGroups of ``namespace``, or of every namespace (None), else (not
    allowed to list them all) of the user's own namespace ``own``, said on stderr."""
    podgroups = _podgroups(cluster, namespace)
    if podgroups is None and namespace is None:
        podgroups = _podgroups(cluster, own)
        print(
            f"note: PodGroups of every namespace are not readable; pending counts are of "
            f"namespace {own} only",
            file=sys.stderr,
        )
    # The tree is made of the Queues: without them there is nothing to show, and an
    # empty table would read as "no queues" (the server's refusal is printed instead).
    return queue_rows(_queues(cluster, forbidden_ok=False) or [], podgroups or [])


def run_cards(cluster: Cluster, node: str | None) -> list[NodeCards]:
    if node:
        one = cluster.get(path_of("", "v1", "nodes", None, node))
        if one is None:
            raise LookupError(f"node {node} not found")
        nodes = [one]
    else:
        nodes = cluster.list(path_of("", "v1", "nodes")) or []
    return cards(nodes, cluster.list(path_of("", "v1", "pods")) or [])


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    args = parser().parse_args(argv)
    try:
        api = load_api_client(args.kubeconfig, pool_size=4, context=args.context)
        namespace = args.namespace or kubeconfig_namespace(args.kubeconfig, args.context)
    except Exception as exc:  # the client raises ConfigException, OSError, TypeError ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"Error: no usable kubeconfig: {reason}", file=sys.stderr)
        return 1
    cluster = Cluster(Kube(api, timeout=30.0))
    try:
        if args.command == "why":
            view: Any = run_why(cluster, namespace, args.pod)
            text = why_text(view)
        elif args.command == "queues":
            view = run_queues(
                cluster, args.namespace if not args.all_namespaces else None, namespace
            )
            text = queues_table(view, args.resource)
        else:
            found = run_cards(cluster, args.node)
            view = [each.json() for each in found]
            text = cards_table(found)
    except LookupError as exc:
        print(f"Error: {exc.args[0]}", file=sys.stderr)
        return 1
    except KubeError as exc:
        if exc.code == 0:
            print(f"Error: no answer from the API server: {exc.message}", file=sys.stderr)
        else:
            print(f"Error from server: {exc}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(view, indent=2, sort_keys=True), file=stream)
    else:
        for line in text:
            print(line, file=stream)
    return 0
