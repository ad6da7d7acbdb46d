"""End to end: the real kubectl binary against the emulator."""

from __future__ import annotations

import json
import re
import time

import pytest
from apiserver_helpers import Kubectl

from kai_py.emulator.apiserver.threaded import ThreadedServer

pytestmark = pytest.mark.e2e

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.e2e.kai-py.dev
spec:
  group: e2e.kai-py.dev
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Priority, type: integer, jsonPath: .spec.priority}
    - {name: Owner, type: string, jsonPath: .spec.owner}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [owner]
            properties:
              priority: {type: integer, minimum: 0, default: 50}
              owner: {type: string}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"""

GADGET = """\
apiVersion: e2e.kai-py.dev/v1
kind: Gadget
metadata: {name: g1}
spec: {owner: team-a}
"""

BAD_GADGET = """\
apiVersion: e2e.kai-py.dev/v1
kind: Gadget
metadata: {name: g2}
spec: {owner: team-b, priority: high}
"""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: main
    image: nginx:1.27
    resources:
      requests: {cpu: 100m, memory: 64Mi}
    env:
    - {name: MODE, value: prod}
"""


def _deleted(out: str) -> str:
    """kubectl's delete line without the " from <ns> namespace" newer kubectl adds."""
    return re.sub(r" from \S+ namespace$", "", out.strip())


def test_apply_get_describe_delete_pod(kubectl: Kubectl) -> None:
    assert kubectl("apply", "-f", "-", input=POD).stdout.strip() == "pod/web created"
    assert kubectl("apply", "-f", "-", input=POD).stdout.strip() == "pod/web unchanged"
    changed = POD.replace("prod", "staging")
    with pytest.raises(AssertionError, match="Forbidden: pod updates may not change"):
        kubectl("apply", "-f", "-", input=changed)  # env is immutable on a pod, as for real
    relabelled = POD.replace("{app: web}", "{app: web, tier: front}")
    assert kubectl("apply", "-f", "-", input=relabelled).stdout.strip() == "pod/web configured"
    got = json.loads(kubectl("get", "pod", "web", "-o", "json").stdout)
    assert got["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert got["spec"]["containers"][0]["env"] == [{"name": "MODE", "value": "prod"}]
    table = kubectl("get", "pods").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert table[1].split()[:4] == ["web", "0/1", "Pending", "0"]
    described = kubectl("describe", "pod", "web").stdout
    fields = {
        line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
        for line in described.splitlines()
        if ":" in line
    }
    assert fields["Name"] == "web" and fields["QoS Class"] == "Burstable"
    assert fields["Image"] == "nginx:1.27" and fields["Status"] == "Pending"
    assert _deleted(kubectl("delete", "pod", "web").stdout) == 'pod "web" deleted'
    missing = kubectl("get", "pod", "web", check=False)
    assert missing.returncode == 1
    assert missing.stderr.strip() == 'Error from server (NotFound): pods "web" not found'


def test_server_side_apply(kubectl: Kubectl) -> None:
    out = kubectl("apply", "--server-side", "-f", "-", input=POD)
    assert out.stdout.strip() == "pod/web serverside-applied"
    out = kubectl(
        "apply", "--server-side", "-f", "-", input=POD.replace("{app: web}", "{app: web, x: z}")
    )
    assert out.stdout.strip() == "pod/web serverside-applied"
    labels = json.loads(kubectl("get", "pod", "web", "-o", "json").stdout)["metadata"]["labels"]
    assert labels == {"app": "web", "x": "z"}


def test_crd_then_its_resources_and_invalid_one(kubectl: Kubectl) -> None:
    out = kubectl("apply", "-f", "-", input=CRD)
    assert out.stdout.strip() == (
        "customresourcedefinition.apiextensions.k8s.io/gadgets.e2e.kai-py.dev created"
    )
    assert (
        kubectl("apply", "-f", "-", input=GADGET).stdout.strip()
        == "gadget.e2e.kai-py.dev/g1 created"
    )
    assert (
        kubectl("apply", "-f", "-", input=GADGET).stdout.strip()
        == "gadget.e2e.kai-py.dev/g1 unchanged"
    )
    table = kubectl("get", "gd").stdout.splitlines()
    assert table[0].split() == ["NAME", "PRIORITY", "OWNER"]
    assert table[1].split() == ["g1", "50", "team-a"]
    bad = kubectl("apply", "-f", "-", input=BAD_GADGET, check=False)
    assert bad.returncode == 1
    # kubectl names the kind from the Status details (kind, group apart), as
    # a real kube-apiserver sends them: "The Queue "q" is invalid" there too.
    assert bad.stderr.strip() == (
        'The Gadget "g2" is invalid: spec.priority: Invalid value: "string": spec.priority in '
        'body must be of type integer: "string"'
    )
    unknown = kubectl(
        "apply",
        "-f",
        "-",
        input=GADGET.replace("owner: team-a", "owner: team-a, color: red"),
        check=False,
    )
    assert unknown.returncode == 1 and 'unknown field "spec.color"' in unknown.stderr
    ssa = kubectl("apply", "--server-side", "-f", "-", input=GADGET.replace("team-a", "team-c"))
    assert ssa.stdout.strip() == "gadget.e2e.kai-py.dev/g1 serverside-applied"
    got = json.loads(kubectl("get", "gadget", "g1", "-o", "json").stdout)
    assert got["spec"] == {"owner": "team-c", "priority": 50}
    assert "Owner:     team-c" in kubectl("describe", "gadget", "g1").stdout
    assert (
        _deleted(kubectl("delete", "-f", "-", input=GADGET).stdout)
        == 'gadget.e2e.kai-py.dev "g1" deleted'
    )


def test_get_watch_streams_changes(kubectl: Kubectl, server: ThreadedServer) -> None:
    kubectl("apply", "-f", "-", input=POD)
    proc = kubectl.popen("get", "pods", "-w", "--request-timeout=10s")
    try:
        time.sleep(1.0)
        kubectl("label", "pod", "web", "seen=yes")
        server.call(server.store.bind_pod("default", "web", "node-7"))
        time.sleep(1.0)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines[0][:3] == ["NAME", "READY", "STATUS"]
    assert [line[0] for line in lines[1:]] == ["web", "web", "web"]


def test_delete_waits_for_finalizers(kubectl: Kubectl, server: ThreadedServer) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        input="""\
apiVersion: v1
kind: ConfigMap
metadata: {name: held, finalizers: [e2e.kai-py.dev/hold]}
data: {a: "1"}
""",
    )
    out = kubectl("delete", "configmap", "held", "--wait=false")
    assert _deleted(out.stdout) == 'configmap "held" deleted'
    got = json.loads(kubectl("get", "configmap", "held", "-o", "json").stdout)
    assert got["metadata"]["deletionTimestamp"]
    kubectl(
        "patch",
        "configmap",
        "held",
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/metadata/finalizers"}]',
    )
    assert kubectl("get", "configmap", "held", check=False).returncode == 1


def test_nodes_table_and_namespaces(kubectl: Kubectl, server: ThreadedServer) -> None:
    server.call(
        server.store.create(
            "nodes",
            {
                "metadata": {"name": "gpu-1", "labels": {"node-role.kubernetes.io/worker": ""}},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "nodeInfo": {"kubeletVersion": "v1.32.0"},
                },
            },
        )
    )
    lines = kubectl("get", "nodes").stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert lines[1].split()[:3] == ["gpu-1", "Ready", "worker"]
    assert lines[1].split()[4] == "v1.32.0"
    names = kubectl("get", "ns", "-o", "name").stdout.split()
    assert {"namespace/default", "namespace/kube-system", "namespace/kube-public"} <= set(names)


def test_typed_create_commands_send_protobuf(kubectl: Kubectl) -> None:
    assert kubectl("create", "namespace", "team-a").stdout.strip() == "namespace/team-a created"
    kubectl("create", "configmap", "settings", "-n", "team-a", "--from-literal=mode=fast")
    kubectl("create", "secret", "generic", "pw", "--from-literal=password=hunter2")
    kubectl("create", "serviceaccount", "robot")
    kubectl("create", "priorityclass", "train", "--value=1000", "--preemption-policy=Never")
    ns = json.loads(kubectl("get", "ns", "team-a", "-o", "json").stdout)
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-a"}
    cm = json.loads(kubectl("get", "cm", "settings", "-n", "team-a", "-o", "json").stdout)
    assert cm["data"] == {"mode": "fast"}
    secret = json.loads(kubectl("get", "secret", "pw", "-o", "json").stdout)
    assert secret["data"] == {"password": "aHVudGVyMg=="} and secret["type"] == "Opaque"
    pc = json.loads(kubectl("get", "priorityclass", "train", "-o", "json").stdout)
    assert pc["value"] == 1000 and pc["preemptionPolicy"] == "Never"
    assert kubectl("get", "sa", "robot", "-o", "name").stdout.strip() == "serviceaccount/robot"
    kubectl("create", "deployment", "d", "--image=nginx", "--replicas=0")
    deploy = json.loads(kubectl("get", "deployment", "d", "-o", "json").stdout)
    assert deploy["spec"]["replicas"] == 0
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx"


def test_drain_evicts_through_the_eviction_subresource(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", input="apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
    kubectl("apply", "-f", "-", input=POD.replace("spec:\n", "spec:\n  nodeName: n1\n"))
    out = kubectl("drain", "n1", "--force", "--grace-period=1", "--timeout=20s")
    assert "node/n1 cordoned" in out.stdout and "pod/web evicted" in out.stdout
    node = json.loads(kubectl("get", "node", "n1", "-o", "json").stdout)
    assert node["spec"]["unschedulable"] is True
    assert kubectl("get", "pods", "-o", "name").stdout.strip() == ""


def test_scale_subresource(kubectl: Kubectl) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        input="""\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: nginx}]}
""",
    )
    assert (
        kubectl("scale", "deployment", "web", "--replicas=4").stdout.strip()
        == "deployment.apps/web scaled"
    )
    got = json.loads(kubectl("get", "deployment", "web", "-o", "json").stdout)
    assert got["spec"]["replicas"] == 4 and got["metadata"]["generation"] == 2
    scale = json.loads(
        kubectl("get", "--raw", "/apis/apps/v1/namespaces/default/deployments/web/scale").stdout
    )
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 4}
    assert scale["status"]["selector"] == "app=web"


def test_describe_shows_events_posted_through_events_k8s_io(
    kubectl: Kubectl, server: ThreadedServer
) -> None:
    kubectl("apply", "-f", "-", input=POD)
    pod = json.loads(kubectl("get", "pod", "web", "-o", "json").stdout)
    server.call(
        server.store.create(
            "events.v1.events.k8s.io",
            {
                "metadata": {"name": "web.1", "namespace": "default"},
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "reportingController": "kai-scheduler",
                "reportingInstance": "kai-scheduler-0",
                "action": "Scheduling",
                "reason": "Unschedulable",
                "type": "Warning",
                "note": "no node has 2 free GPUs",
                "regarding": {
                    "kind": "Pod",
                    "namespace": "default",
                    "name": "web",
                    "uid": pod["metadata"]["uid"],
                    "apiVersion": "v1",
                },
            },
        )
    )
    described = kubectl("describe", "pod", "web").stdout
    events = described.split("Events:", 1)[1]
    assert "Warning  Unschedulable" in events and "no node has 2 free GPUs" in events
    listed = kubectl("get", "events").stdout.splitlines()
    assert listed[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert "pod/web" in listed[1] and "Unschedulable" in listed[1]


SERVICE = """\
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: https, port: 443, targetPort: 8443}
"""


def test_reapply_and_taints_merge_lists_by_their_keys(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", input=SERVICE)
    assert kubectl("apply", "-f", "-", input=SERVICE).stdout.strip() == "service/web unchanged"
    one_port = SERVICE.replace("  - {name: https, port: 443, targetPort: 8443}\n", "")
    assert kubectl("apply", "-f", "-", input=one_port).stdout.strip() == "service/web configured"
    svc = json.loads(kubectl("get", "svc", "web", "-o", "json").stdout)
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8080}]
    kubectl("apply", "-f", "-", input="apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
    kubectl("taint", "node", "n1", "gpu=true:NoSchedule", "spot=yes:NoExecute")
    kubectl("taint", "node", "n1", "gpu-")
    node = json.loads(kubectl("get", "node", "n1", "-o", "json").stdout)
    assert [t["key"] for t in node["spec"]["taints"]] == ["spot"]


def test_auth_can_i_and_whoami(kubectl: Kubectl) -> None:
    assert kubectl("auth", "can-i", "create", "pods").stdout.strip() == "yes"
    assert "kubernetes-admin" in kubectl("auth", "whoami").stdout


def test_logs_come_from_the_log_provider(kubectl: Kubectl, server: ThreadedServer) -> None:
    kubectl("apply", "-f", "-", input=POD)
    waiting = kubectl("logs", "web", check=False)
    assert waiting.returncode == 1
    assert 'container "main" in pod "web" is waiting to start: ContainerCreating' in waiting.stderr
    server.call(
        server.store.patch(
            "pods",
            "default",
            "web",
            {
                "status": {
                    "phase": "Running",
                    "containerStatuses": [
                        {"name": "main", "ready": True, "state": {"running": {}}}
                    ],
                }
            },
            subresource="status",
        )
    )
    assert kubectl("logs", "web").stdout == ""
    server.store.log_provider = lambda pod, container: f"{pod['metadata']['name']}/{container}\n"
    assert kubectl("logs", "web").stdout == "web/main\n"


def test_diff_uses_server_side_dry_run(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", input=POD)
    same = kubectl("diff", "-f", "-", input=POD, check=False)
    assert same.returncode == 0 and same.stdout == ""
    changed = kubectl("diff", "-f", "-", input=POD.replace("nginx:1.27", "nginx:1.28"), check=False)
    assert changed.returncode == 1
    lines = [
        line
        for line in changed.stdout.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert lines == ["-    image: nginx:1.27", "+    image: nginx:1.28"]
    got = json.loads(kubectl("get", "pod", "web", "-o", "json").stdout)
    assert got["spec"]["containers"][0]["image"] == "nginx:1.27"  # a dry run changed nothing
