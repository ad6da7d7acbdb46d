"""``kubectl kai why|queues|cards`` against a live cluster, on both backends.

The plugin's ``main`` runs with the backend's kubeconfig (as kubectl runs
``kubectl-kai``) while the operator schedules: queues, a pending gang that can
never fit, a second job behind it, and one card shared by two half-GPU pods.
The figures asserted are those kai-py wrote in the objects' status.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import RELEASE, render
from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    create_pod,
    create_podgroup,
    create_queues,
    kai_shared,
    pod,
    podgroup,
    queue,
    wait_for,
)
from realapi_backends import Backend

from kai_py.api import keys
from kai_py.kubectl.main import main

NS = "team-a"


def _kai(backend: Backend, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--kubeconfig", backend.kubeconfig_path, *args], out)
    return code, out.getvalue()


def _json(backend: Backend, *args: str) -> Any:
    code, text = _kai(backend, *args, "-o", "json")
    assert code == 0, text
    return json.loads(text)


def _setup(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, operator: Operator) -> None:
    create_queues(
        custom,
        queue("root"),
        queue("team-a", parent="root", gpu_quota=2),
        queue("team-b", parent="root", gpu_quota=2),
    )
    for name in ("half-a", "half-b"):
        create_podgroup(custom, podgroup(name, NS, "team-a"))
        body = kai_shared(pod(name, NS, name, gpus=0), "0.5")
        create_pod(core, body)
    # Two 4-GPU nodes: a gang of 3 pods of 3 GPUs never fits; a 5-GPU pod neither.
    create_podgroup(custom, podgroup("big", NS, "team-a", min_member=3))
    for i in range(3):
        create_pod(core, pod(f"big-{i}", NS, "big", gpus=3))
    create_podgroup(custom, podgroup("huge", NS, "team-a"))
    create_pod(core, pod("huge-0", NS, "huge", gpus=5))

    def settled() -> bool:
        running = [p for p in core.list_namespaced_pod(NS).items if p.status.phase == "Running"]
        groups = {
            g["metadata"]["name"]: g
            for g in custom.list_namespaced_custom_object(
                "scheduling.run.ai", "v2alpha2", NS, "podgroups"
            )["items"]
        }
        team = custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", "team-a")
        return (
            len(running) == 2
            and all("queuePosition" in (groups[g].get("status") or {}) for g in ("big", "huge"))
            and "fairShare" in (team.get("status") or {})
            and (team["status"].get("allocated") or {}).get(keys.GPU_RESOURCE) in ("1", 1)
        )

    wait_for(settled, timeout=60, what=f"the shared pods Running, the line written\n{operator.log}")


def test_kubectl_kai_why_queues_and_cards(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _setup(core, custom, operator)
    team = custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", "team-a")
    fair = float(team["status"]["fairShare"][keys.GPU_RESOURCE])
    big = custom.get_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", NS, "podgroups", "big"
    )
    where = big["status"]["queuePosition"]

    # why: the gang, the queue, the place in line, and what would make it fit.
    view = _json(backend, "why", "big-0", "-n", NS)
    assert view["pod"] == f"{NS}/big-0"
    gang = view["podGroup"]
    assert (gang["minMember"], gang["pods"], gang["placed"], gang["pending"]) == (3, 3, 0, 3)
    assert gang["needs"]["gpu"] == 9
    assert view["position"] == where
    assert {where["inQueue"], where["inCluster"]} <= {1, 2}
    assert view["queue"]["name"] == "team-a" and view["queue"]["parents"] == ["root"]
    assert view["queue"]["fairShare"]["gpu"] == fair
    assert view["queue"]["allocated"]["gpu"] == 1
    assert view["queue"]["freeOfFairShare"]["gpu"] == max(0.0, fair - 1)
    assert any(c["reason"] for c in gang["conditions"])
    # Each 3-GPU pod fits on a node, but not the three at once (4 and 3 GPUs free).
    assert any(
        "the nodes' free GPUs now hold 2 of the 3 pods of 3 GPUs it needs together" in hint
        for hint in view["fit"]
    ), view["fit"]
    huge = _json(backend, "why", "pod/huge-0", "-n", NS)
    assert any(
        "no node can ever hold this pod: it asks for 5 GPUs and the largest has 4" in hint
        for hint in huge["fit"]
    ), huge["fit"]
    code, text = _kai(backend, "why", "big-0", "--namespace", NS)
    assert code == 0
    assert f"Position {where['inQueue']} in team-a ({where['inCluster']} in the cluster)" in text
    assert "needs 9 GPUs, queue has" in text
    assert max(len(line) for line in text.splitlines()) <= 120, text
    assert _kai(backend, "why", "nobody", "-n", NS)[0] == 1

    # queues: the tree with the figures of the queues' status, pending per subtree.
    rows = {row["name"]: row for row in _json(backend, "queues")}
    assert [rows[n]["depth"] for n in ("root", "team-a", "team-b")] == [0, 1, 1]
    assert rows["team-a"]["limits"]["gpu"]["quota"] == 2
    assert rows["team-a"]["fairShare"]["gpu"] == fair
    assert rows["team-a"]["allocated"]["gpu"] == 1
    assert (rows["team-a"]["pending"], rows["team-b"]["pending"], rows["root"]["pending"]) == (
        2,
        0,
        2,
    )
    first = "big" if where["inQueue"] == 1 else "huge"
    assert rows["team-a"]["headOfLine"] == f"{NS}/{first}"
    code, table = _kai(backend, "queues")
    assert code == 0 and max(len(line) for line in table.splitlines()) <= 120
    assert any(
        line.startswith("  team-a") and f"{NS}/{first}" in line for line in table.splitlines()
    )

    # cards: the shared card, its two holders and the reservation pod holding it.
    node = core.read_namespaced_pod("half-a", NS).spec.node_name
    assert core.read_namespaced_pod("half-b", NS).spec.node_name == node
    [on_node] = _json(backend, "cards", node)
    shared = [c for c in on_node["cards"] if c["holders"]]
    assert len(shared) == 1, on_node
    card = shared[0]
    assert sorted((h["pod"], h["share"]) for h in card["holders"]) == [
        (f"{NS}/half-a", "0.5"),
        (f"{NS}/half-b", "0.5"),
    ]
    assert card["used"] == 1.0
    [holder] = card["reservationPods"]
    assert holder.startswith(f"{keys.RESERVATION_NAMESPACE}/")
    assert card["uuid"].startswith("GPU-")
    code, table = _kai(backend, "cards", node)
    assert code == 0 and f"{NS}/half-a  0.5" in table
    assert max(len(line) for line in table.splitlines()) <= 120

    # The line did not move: cycles run (a node's label changed) and write no
    # PodGroup status (the PodGroups keep their resourceVersion).
    def versions() -> dict[str, str]:
        listing = custom.list_namespaced_custom_object(
            "scheduling.run.ai", "v2alpha2", NS, "podgroups"
        )
        return {g["metadata"]["name"]: g["metadata"]["resourceVersion"] for g in listing["items"]}

    before = versions()
    for i in range(3):
        core.patch_node("gpu-1", {"metadata": {"labels": {"kubectl-kai-test": str(i)}}})
        time.sleep(1.0)
    assert versions() == before, operator.log[-3000:]


def test_kubectl_finds_the_plugin_and_passes_the_context(
    backend: Backend, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, tmp_path: Path
) -> None:
    """The real kubectl runs ``kubectl-kai`` from PATH with the arguments after ``kai``;
    ``--context`` picks the kubeconfig's context and its namespace (the current context
    points at nothing)."""
    kubectl = Path(sys.executable).parent / "kubectl"
    if not kubectl.is_file():
        pytest.skip("kubectl is missing: install the test extras")
    create_queues(custom, queue("root"), queue("team-a", parent="root", gpu_quota=2))
    create_podgroup(custom, podgroup("solo", NS, "team-a"))
    create_pod(core, pod("solo-0", NS, "solo", gpus=1))
    config = yaml.safe_load(Path(backend.kubeconfig_path).read_text())
    good = config["contexts"][0]
    good["name"], good["context"]["namespace"] = "mine", NS
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}})
    config["contexts"].append(
        {"name": "elsewhere", "context": {"cluster": "nowhere", "user": good["context"]["user"]}}
    )
    config["current-context"] = "elsewhere"
    kubeconfig = tmp_path / "two-contexts"
    kubeconfig.write_text(yaml.safe_dump(config))
    plugins = tmp_path / "bin"
    plugins.mkdir()
    shim = plugins / "kubectl-kai"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kai_py.kubectl "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{plugins}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(kubeconfig),
    }

    def kubectl_kai(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(kubectl), "kai", *args], env=env, capture_output=True, text=True, timeout=60
        )

    done = kubectl_kai("--context", "mine", "queues", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert [row["name"] for row in json.loads(done.stdout)][-2:] == ["root", "team-a"]
    # No -n: the namespace is the context's.
    done = kubectl_kai("why", "solo-0", "--context", "mine", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["podGroup"]["name"] == f"{NS}/solo"
    # The current context reaches no server: a clear error, no traceback.
    done = kubectl_kai("queues")
    assert done.returncode == 1 and done.stderr.startswith(
        "Error: no answer from the API server"
    ), done.stderr


_VIEWER = f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: kai-viewer, namespace: {NS}}}
rules:
- apiGroups: [""]
  resources: [pods, events]
  verbs: [get, list]
- apiGroups: [scheduling.run.ai]
  resources: [podgroups]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: kai-viewer, namespace: {NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: kai-viewer}}
subjects: [{{kind: ServiceAccount, name: viewer, namespace: {NS}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: kai-queue-viewer}}
rules:
- apiGroups: [scheduling.run.ai]
  resources: [queues]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: kai-queue-viewer}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kai-queue-viewer}}
subjects: [{{kind: ServiceAccount, name: viewer, namespace: {NS}}}]
"""


@pytest.fixture
def real_server(backend: Backend) -> Any:
    """The real API server (RBAC with ServiceAccount tokens), asked for before the
    operator starts, so the emulator's run is skipped before it has one to stop."""
    if backend.server is None:
        pytest.skip("RBAC with ServiceAccount tokens: the real API server's")
    return backend.server


def test_a_user_of_one_namespace_gets_what_they_may_read(
    real_server: Any,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Under RBAC (the real API server's): a user who may read their namespace and the
    Queues, not the nodes nor other namespaces, gets ``why`` without the node hints and
    ``queues`` counted in their namespace (said on stderr); ``cards`` needs the nodes
    and says the server's refusal."""
    server = real_server
    create_queues(custom, queue("root"), queue("team-a", parent="root", gpu_quota=2))
    create_podgroup(custom, podgroup("solo", NS, "team-a"))
    create_pod(core, pod("solo-0", NS, "solo", gpus=5))  # never fits: stays in line
    wait_for(
        lambda: (
            custom.get_namespaced_custom_object(
                "scheduling.run.ai", "v2alpha2", NS, "podgroups", "solo"
            ).get("status")
            or {}
        ).get("queuePosition"),
        timeout=30,
        what=f"solo's place in line\n{operator.log}",
    )
    server.apply_yaml(_VIEWER)
    token = server.token_for(NS, "viewer")
    kubeconfig = server.write_kubeconfig(str(tmp_path / "viewer"), token, "viewer")

    def kai(*args: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(["--kubeconfig", kubeconfig, "-n", NS, *args], out)
        return code, out.getvalue()

    code, text = kai("why", "solo-0", "-o", "json")
    assert code == 0
    view = json.loads(text)
    assert view["podGroup"]["name"] == f"{NS}/solo" and view["queue"]["name"] == "team-a"
    assert view["position"]["inQueue"] == 1
    assert not any("node" in hint for hint in view["fit"])  # the nodes are not readable
    capsys.readouterr()
    # Without -n: the kubeconfig's namespace (default), where they may read nothing.
    assert main(["--kubeconfig", kubeconfig, "queues", "-o", "json"], io.StringIO()) == 0
    assert "pending counts are of namespace default only" in capsys.readouterr().err
    code, text = kai("queues", "-A", "-o", "json")
    assert code == 0 and "not readable" in capsys.readouterr().err
    rows = {row["name"]: row for row in json.loads(text)}
    assert rows["team-a"]["pending"] == 1  # counted in the user's namespace
    code, _ = kai("cards")
    assert code == 1
    assert capsys.readouterr().err.startswith("Error from server: 403")


def test_a_user_bound_only_to_the_charts_viewer_role_runs_queues_and_why(
    real_server: Any,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The chart's ``rbac.viewerRole`` ClusterRole, as Helm renders it, bound cluster-wide
    to a ServiceAccount that has nothing else: every figure of ``queues``, ``why`` (with
    the node hints) and ``cards`` is readable; without the binding the same user is
    refused."""
    server = real_server
    [role] = [
        o
        for o in render({"rbac": {"viewerRole": True}})
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == f"{RELEASE}-viewer"
    ]
    create_queues(custom, queue("root"), queue("team-a", parent="root", gpu_quota=2))
    create_podgroup(custom, podgroup("solo", NS, "team-a"))
    create_pod(core, pod("solo-0", NS, "solo", gpus=5))  # never fits: stays in line
    wait_for(
        lambda: (
            custom.get_namespaced_custom_object(
                "scheduling.run.ai", "v2alpha2", NS, "podgroups", "solo"
            ).get("status")
            or {}
        ).get("queuePosition"),
        timeout=30,
        what=f"solo's place in line\n{operator.log}",
    )
    token = server.token_for(NS, "reader")
    kubeconfig = server.write_kubeconfig(str(tmp_path / "reader"), token, "reader")

    def kai(*args: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(["--kubeconfig", kubeconfig, "-n", NS, *args], out)
        return code, out.getvalue()

    assert kai("why", "solo-0")[0] == 1  # not bound yet: the pod is not readable
    assert capsys.readouterr().err.startswith("Error from server: 403")
    # Bound in the namespace only: its pods and PodGroups, not the cluster-scoped Queues,
    # which `why` says rather than calling the queue missing; `queues` has no tree.
    local = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "reader-viewer", "namespace": NS},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}],
    }
    server.apply_yaml(yaml.safe_dump_all([role, local]))
    wait_for(lambda: kai("why", "solo-0", "-o", "json")[0] == 0, timeout=30, what="the binding")
    view = json.loads(kai("why", "solo-0", "-o", "json")[1])
    assert view["podGroup"]["name"] == f"{NS}/solo"
    assert view["fit"][0].startswith("Queue 'team-a' cannot be read with your rights"), view
    capsys.readouterr()
    assert kai("queues")[0] == 1
    assert capsys.readouterr().err.startswith("Error from server: 403")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "reader-viewer"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}],
    }
    server.apply_yaml(yaml.safe_dump(binding))

    def granted() -> bool:
        return kai("queues", "-A", "-o", "json")[0] == 0

    wait_for(granted, timeout=30, what="the binding to take effect")
    capsys.readouterr()
    code, text = kai("queues", "-A", "-o", "json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(text)}
    assert rows["team-a"]["pending"] == 1
    assert "not readable" not in capsys.readouterr().err  # every namespace's PodGroups
    code, text = kai("why", "solo-0", "-o", "json")
    assert code == 0, capsys.readouterr().err
    view = json.loads(text)
    assert view["podGroup"]["name"] == f"{NS}/solo" and view["queue"]["name"] == "team-a"
    # The nodes are readable: the node hint is there.
    assert any("no node can ever hold this pod" in hint for hint in view["fit"]), view["fit"]
    assert kai("cards")[0] == 0
