"""charts/kai-py rendered by Helm's engine: objects, RBAC, CRDs and install objects."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from typing import Any

import helm_python as helm
import pytest
import yaml
from chart_helpers import CHART, NAMESPACE, OTHER_VALUES, RELEASE, ROOT, by_kind, render

from kai_py import __version__
from kai_py.api import install
from kai_py.api.crdgen import render_crds
from kai_py.podgrouper.kinds import READS as OWNER_READS

Json = dict[str, Any]

KOPF_CRDS = ("apiextensions.k8s.io", "customresourcedefinitions", "list,watch")

#: The rules of each role, as (apiGroup, resources, verbs), written down from the
#: API calls of the code each role runs. Changing what a role calls means changing
#: this table and the chart together.
EXPECTED_RULES: dict[str, set[tuple[str, str, str]]] = {
    # kai_py/controllers/scheduling.py (watches, warm-up/resync LISTs) and kai_py/writes/writer.py
    "scheduler": {
        KOPF_CRDS,
        ("", "nodes,pods", "list,watch"),
        # ConfigMaps' names (a pod that needs a missing one waits) and the volume
        # predicate's inputs
        ("", "configmaps,persistentvolumeclaims,persistentvolumes", "list,watch"),
        ("storage.k8s.io", "storageclasses", "list,watch"),
        ("", "pods/status", "patch"),  # nominatedNodeName, PodScheduled condition
        ("", "pods/eviction", "create"),  # reclaim, preempt, consolidation
        ("", "events", "create,patch"),  # Events, and their aggregated counts
        ("scheduling.k8s.io", "priorityclasses", "list,watch"),
        ("scheduling.run.ai", "queues", "list,watch"),
        ("scheduling.run.ai", "podgroups", "list,watch,patch"),  # stale-since annotation
        ("scheduling.run.ai", "queues/status,podgroups/status", "patch"),
        ("scheduling.run.ai", "bindrequests", "list,watch,create,delete"),
        ("kai.scheduler", "topologies", "list,watch"),  # gangs' topology constraints
        # kai_py/controllers/kaiconfig.py: KAI's Config and SchedulingShard, and their status
        ("kai.scheduler", "configs,schedulingshards", "list,watch"),
        ("kai.scheduler", "configs/status,schedulingshards/status", "patch"),
    },
    # kai_py/controllers/binder.py and kai_py/binder/binding.py
    "binder": {
        KOPF_CRDS,
        # the group label; reservation pods are made and deleted under a Role of
        # the reservation namespace only (no namespace is created: the chart makes it)
        ("", "pods", "get,list,watch,patch"),
        ("", "pods/binding", "create"),
        ("", "nodes", "get"),
        ("", "configmaps", "get,create,patch,delete"),  # the GPU ConfigMaps
        ("", "persistentvolumeclaims", "get,patch"),  # volume.kubernetes.io/selected-node
        ("", "events", "create"),
        ("scheduling.run.ai", "bindrequests", "get,list,watch"),  # the bind queue
        ("scheduling.run.ai", "bindrequests/status", "patch"),
        # staggered start set on the pod's queue, found through its PodGroup
        ("scheduling.run.ai", "queues,podgroups", "get"),
    },
    # kai_py/controllers/grouper.py and kai_py/podgrouper/service.py
    "podgrouper": {
        KOPF_CRDS,
        ("", "pods", "get,list,watch,patch"),  # the pod-group-name annotation
        ("", "events", "create"),
        # get: a 409 on create is read back; patch: a scaled workload's gang fields
        ("scheduling.run.ai", "podgroups", "get,list,watch,create,patch"),
        # a queue's tenancy (namespaces, priority classes) before a PodGroup is made
        ("scheduling.run.ai", "queues", "list"),
        # owners of pods, and what each kind's grouper reads besides (kai_py/podgrouper/kinds)
        *((group, ",".join(resources), "get") for group, resources in OWNER_READS.items()),
        # kai_py/controllers/poolwarnings.py: the pools the shards serve, the label key
        ("kai.scheduler", "configs,schedulingshards", "list,watch"),
    },
    # kai_py/controllers/webhooks/validation.py: a Queue's parent and the tree above it
    # and Kopf's CRD scan at start-up
    "webhooks": {
        KOPF_CRDS,
        ("scheduling.run.ai", "queues", "get,list"),
        # kai_py/controllers/webhooks/tenancy.py: the cards a pinned pod's pin allows
        ("", "nodes", "list"),
        # kai_py/controllers/webhooks/evictions.py: the pod the scheduler evicts
        ("", "pods", "get"),
    },
    # kai_py/gpu/nodeagent.py: reads its Node, patches the inventory annotation
    "node-agent": {("", "nodes", "get,patch")},
    # kai_py/apiclient/crds.py, the CRD hook Job: kai-py's own CRDs (by name) only
    "crds": {("apiextensions.k8s.io", "customresourcedefinitions", "get,create,patch")},
}


def _rules(role: Json) -> set[tuple[str, str, str]]:
    return {
        (",".join(r["apiGroups"]), ",".join(r["resources"]), ",".join(r["verbs"]))
        for r in role["rules"]
    }


@pytest.fixture(scope="module")
def default() -> list[Json]:
    return render()


@pytest.fixture(scope="module")
def other() -> list[Json]:
    return render(OTHER_VALUES)


def test_every_object_is_a_named_kubernetes_object(default: list[Json], other: list[Json]) -> None:
    for objects in (default, other):
        keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
        assert len(keys) == len(set(keys)), "an object is rendered twice"
        for obj in objects:
            assert obj["apiVersion"] and obj["kind"] and obj["metadata"]["name"]
    print(f"\nrendered objects: default values {len(default)}, second set {len(other)}")


def test_crds_are_the_generated_ones() -> None:
    generated = render_crds()
    in_chart = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    in_repo = {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}
    assert in_chart == in_repo == generated


def test_install_objects_are_kai_py_devs(default: list[Json]) -> None:
    def strip(obj: Json) -> Json:
        meta = {k: v for k, v in obj["metadata"].items() if k not in ("labels", "annotations")}
        return {**obj, "metadata": meta}

    rendered = {
        (o["kind"], o["metadata"]["name"]): strip(o)
        for o in default
        if o["kind"] in ("PriorityClass", "Queue", "Namespace", "Config", "SchedulingShard")
        or (o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "kai-resource-reservation")
        if o["metadata"]["name"] != "kai-py-critical"  # the chart's own pods' class
    }
    expected = {(o["kind"], o["metadata"]["name"]): o for o in install.install_objects(NAMESPACE)}
    assert rendered == expected
    values = {
        name: o["value"]
        for name, o in by_kind(default, "PriorityClass").items()
        if name != "kai-py-critical"
    }
    assert values == {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    # Kept on uninstall: pods naming them would be refused without them.
    assert all(
        by_kind(default, "PriorityClass")[name]["metadata"]["annotations"]
        == {"helm.sh/resource-policy": "keep"}
        for name in values
    )
    queues = by_kind(default, "Queue")
    assert queues["default-queue"]["spec"]["parentQueue"] == "default-parent-queue"
    # Queues stay on uninstall (they block nothing); KAI keeps them too.
    assert all(
        q["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for q in queues.values()
    )


def test_the_image_is_this_version_by_default(default: list[Json]) -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["appVersion"] == __version__
    images = {
        c["image"]
        for d in by_kind(default, "Deployment").values()
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {install.DEFAULT_IMAGE}
    binder = by_kind(default, "Deployment")["kai-py-binder"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in binder["containers"][0]["env"]}
    assert env["KAI_PY_RESERVATION_IMAGE"] == install.DEFAULT_IMAGE
    assert env["KAI_PY_RESERVATION_SERVICE_ACCOUNT"] == install.RESERVATION_SERVICE_ACCOUNT


def test_rbac_per_role_is_exactly_what_the_code_calls(
    default: list[Json], other: list[Json]
) -> None:
    roles = by_kind(default, "ClusterRole")
    got = {name.removeprefix(f"{RELEASE}-"): _rules(role) for name, role in roles.items()}
    assert got == EXPECTED_RULES
    with_binding = [r for r, rules in got.items() if any("pods/binding" in x[1] for x in rules)]
    assert with_binding == ["binder"]
    for role, rules in got.items():
        print(f"\nRBAC rules, {role}: {len(rules)}")
    reservation = by_kind(default, "Role")["kai-resource-reservation"]
    assert _rules(reservation) == {("", "pods", "patch")}
    # The binder's pod creations and deletions: in the reservation namespace only.
    binder_role = by_kind(default, "Role")[f"{RELEASE}-binder-reservations"]
    assert binder_role["metadata"]["namespace"] == "kai-resource-reservation"
    assert _rules(binder_role) == {("", "pods", "create,delete")}
    for objects, account in ((default, "kai-py-binder"), (other, "kai-py")):
        binding = by_kind(objects, "RoleBinding")[f"{RELEASE}-binder-reservations"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
        ]


def test_every_account_used_exists_and_is_bound(default: list[Json], other: list[Json]) -> None:
    for objects in (default, other):
        accounts = {
            (o["metadata"]["namespace"], o["metadata"]["name"])
            for o in objects
            if o["kind"] == "ServiceAccount"
        }
        bound = {
            (s["namespace"], s["name"])
            for o in objects
            if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
            for s in o["subjects"]
        }
        used = {
            (o["metadata"]["namespace"], o["spec"]["template"]["spec"]["serviceAccountName"])
            for o in objects
            if o["kind"] in ("Deployment", "DaemonSet")
        }
        assert used <= accounts and used <= bound and bound <= accounts


def test_pods_are_locked_down_and_probed(default: list[Json], other: list[Json]) -> None:
    for objects in (default, other):
        for obj in objects:
            if obj["kind"] not in ("Deployment", "DaemonSet"):
                continue
            pod = obj["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert isinstance(pod["securityContext"]["runAsUser"], int)
            for c in pod["containers"]:
                sc = c["securityContext"]
                assert sc["readOnlyRootFilesystem"] is True
                assert sc["allowPrivilegeEscalation"] is False
                assert sc["capabilities"]["drop"] == ["ALL"]
                assert "resources" in c
                if obj["kind"] == "Deployment":
                    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
                    assert c["readinessProbe"]


def test_deployments_by_mode_and_their_arguments(default: list[Json], other: list[Json]) -> None:
    def args(objects: list[Json]) -> dict[str, list[str]]:
        return {
            name: d["spec"]["template"]["spec"]["containers"][0]["args"]
            for name, d in by_kind(objects, "Deployment").items()
        }

    per_role = args(default)
    assert set(per_role) == {
        "kai-py-scheduler",
        "kai-py-binder",
        "kai-py-podgrouper",
        "kai-py-webhooks",
    }
    assert "--controllers=binder" in per_role["kai-py-binder"]
    assert "--scheduler-name=kai-scheduler" in per_role["kai-py-scheduler"]
    # Leader election by default; the webhooks serve on every replica (the operator
    # never elects for --controllers webhooks, whatever the flag says).
    assert all("--leader-elect" in a for a in per_role.values())
    assert "Role" in {o["kind"] for o in default}

    single = args(other)
    assert set(single) == {"kai-py", "kai-py-webhooks"}
    assert "--controllers=scheduler,binder,podgrouper" in single["kai-py"]
    for option in ("--scheduler-name=my-scheduler", "--placement=spread", "--no-leader-elect"):
        assert option in single["kai-py"]
    assert by_kind(other, "Deployment")["kai-py"]["spec"]["replicas"] == 2
    agent = by_kind(default, "DaemonSet")["kai-py-node-agent"]["spec"]["template"]["spec"]
    assert agent["containers"][0]["args"] == ["node-agent"]
    env = {e["name"]: e.get("value") for e in agent["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"  # NVML without a card
    assert "DaemonSet" not in {o["kind"] for o in other}
    assert "ServiceMonitor" in {o["kind"] for o in other}
    assert "ServiceMonitor" not in {o["kind"] for o in default}
    assert "kai-py-leader-election" not in by_kind(other, "Role")
    leases = by_kind(default, "Role")["kai-py-leader-election"]
    assert _rules(leases) == {("coordination.k8s.io", "leases", "get,create,update")}
    groups = {r for r in _rules(by_kind(other, "ClusterRole")[f"{RELEASE}-podgrouper"])}
    assert ("ray.io", "*", "get") in groups  # podgrouper.extraOwnerGroups: the whole group


def test_webhooks_failure_policy_and_certificate(default: list[Json], other: list[Json]) -> None:
    for objects, policy in ((default, "Ignore"), (other, "Fail")):
        configs = [
            *by_kind(objects, "MutatingWebhookConfiguration").values(),
            *by_kind(objects, "ValidatingWebhookConfiguration").values(),
        ]
        hooks = [h for c in configs for h in c["webhooks"]]
        # The eviction webhook is Fail whatever the value (its own test, below).
        assert {h["failurePolicy"] for h in hooks if h["name"] != "evictions.kai-py.dev"} == {
            policy
        }
        secret = by_kind(objects, "Secret")["kai-py-webhooks-tls"]
        assert {h["clientConfig"]["caBundle"] for h in hooks} == {secret["data"]["ca.crt"]}
        # Only pods for kai-py's scheduler are sent to the pod webhooks.
        scheduler = "kai-scheduler" if objects is default else "my-scheduler"
        for hook in hooks:
            if hook["name"] == "evictions.kai-py.dev":
                continue
            if hook["rules"][0]["resources"] == ["pods"]:
                assert hook["matchConditions"] == [
                    {
                        "name": "kai-py-pods-only",
                        "expression": "has(object.spec.schedulerName) && "
                        f'object.spec.schedulerName == "{scheduler}"',
                    }
                ], hook["name"]
            else:
                assert "matchConditions" not in hook
        # The webhooks never see the pods of kai-py itself nor its reservation pods.
        for hook in hooks:
            if "namespaceSelector" in hook:
                excluded = hook["namespaceSelector"]["matchExpressions"][0]["values"]
                assert {NAMESPACE, "kai-resource-reservation", "kube-system"} <= set(excluded)
    env = {
        e["name"]: e.get("value")
        for e in by_kind(other, "Deployment")["kai-py-webhooks"]["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
    }
    assert env["KAI_PY_FRACTION_RUNTIME_CLASS"] == "nvidia"


@pytest.mark.parametrize(
    "values",
    [
        {"shards": [{"name": "default"}, {"name": "pool-b", "partitionLabelValue": "b"}]},
        {**OTHER_VALUES, "webhooks": {"failurePolicy": "Ignore"}},
    ],
    ids=["per-role-with-shards", "single"],
)
def test_only_the_schedulers_evictions_go_to_the_eviction_webhook(values: Json) -> None:
    objects = render(values)
    [config] = by_kind(objects, "ValidatingWebhookConfiguration").values()
    [hook] = [h for h in config["webhooks"] if h["name"] == "evictions.kai-py.dev"]
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods/eviction"],
            "operations": ["CREATE"],
            "scope": "Namespaced",
        }
    ]
    assert hook["clientConfig"]["service"]["path"] == "/pods-eviction"
    # An eviction the webhook could not check does not pass, even with Ignore elsewhere.
    assert hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] <= 5
    # Every Deployment that runs a scheduler (each shard's too) runs as the one account named.
    deployments = by_kind(objects, "Deployment").values()
    schedulers = [
        d["spec"]["template"]["spec"]
        for d in deployments
        if any(
            "scheduler" in a.split("=", 1)[1].split(",")
            for a in d["spec"]["template"]["spec"]["containers"][0]["args"]
            if a.startswith("--controllers=")
        )
    ]
    assert len(schedulers) == len(values.get("shards") or [{}])
    [account] = {
        f"system:serviceaccount:{NAMESPACE}:{spec['serviceAccountName']}" for spec in schedulers
    }
    assert hook["matchConditions"] == [
        {"name": "kai-py-scheduler-only", "expression": f"request.userInfo.username == '{account}'"}
    ]
    webhooks = by_kind(objects, "Deployment")["kai-py-webhooks"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in webhooks["containers"][0]["env"]}
    assert env["KAI_PY_SCHEDULER_USERS"] == account


def test_the_dashboard_is_in_the_chart(default: list[Json]) -> None:
    import json

    dashboard = json.loads(by_kind(default, "ConfigMap")["kai-py-dashboard"]["data"]["kai-py.json"])
    exprs = " ".join(
        t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if "expr" in t
    )
    for name in (
        "kai_e2e_scheduling_latency_milliseconds",
        "kai_queue_allocated_gpus",
        "kai_py_gpu_card_allocated_share",  # the card panel
    ):
        assert name in exprs


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"placement": "random"}, "placement"),
        ({"webhooks": {"failurePolicy": "Sometimes"}}, "failurePolicy"),
        ({"deploymentMode": "many"}, "deploymentMode"),
        ({"schedulePeriod": 0}, "schedulePeriod"),
    ],
)
def test_bad_values_are_refused_by_the_schema(values: Json, field: str) -> None:
    chart = helm.Chart.load(str(CHART))
    with pytest.raises(helm.HelmError) as err:
        chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert field in str(err.value)


@pytest.mark.parametrize("values", [{}, OTHER_VALUES], ids=["default", "second-set"])
def test_helm_lint_is_clean(values: Json) -> None:
    report = helm.lint(str(CHART), values, strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert report["errors"] == [] and problems == [], report


def test_every_webhook_path_is_served_and_hami_goes_first() -> None:
    # Gating on: its webhook is only in the chart then (off, pod creation never waits on it).
    default = render({"queueAdmissionGating": "all"})
    # In a process of its own: importing the server registers its handlers on Kopf's
    # default registry, which other tests' operators in this process would then serve.
    listing = subprocess.run(
        [
            sys.executable,
            "-c",
            "import kopf, kai_py.controllers.webhooks.server\n"
            "for h in kopf.get_default_registry()._webhooks.get_all_handlers(): print(h.id)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    served = set(listing.stdout.split())
    mutating = by_kind(default, "MutatingWebhookConfiguration")
    validating = by_kind(default, "ValidatingWebhookConfiguration")
    paths = [
        h["clientConfig"]["service"]["path"].lstrip("/")
        for c in (*mutating.values(), *validating.values())
        for h in c["webhooks"]
    ]
    assert set(paths) == served
    # HAMi's resources become kai-py's sharing before the device-access mutation sees the pod.
    [config] = mutating.values()
    order = [h["clientConfig"]["service"]["path"] for h in config["webhooks"]]
    assert order == ["/hami-resources", "/pods-deviceaccess", "/pods-queue-admission"]


def test_queue_admission_webhook_and_flag_follow_the_value(default: list[Json]) -> None:
    [config] = by_kind(default, "MutatingWebhookConfiguration").values()
    assert "/pods-queue-admission" not in str(config)
    assert "--queue-admission-gating=off" in str(default)
    gated = render({"queueAdmissionGating": "queues"})
    assert "--queue-admission-gating=queues" in str(gated)


def test_shards_make_schedulingshards_and_scheduler_deployments() -> None:
    values: Json = {
        "nodePoolLabelKey": "example.com/pool",
        "shards": [
            {"name": "default", "settings": {"placementStrategy": {"gpu": "spread"}}},
            {"name": "pool-a", "partitionLabelValue": "pool-a", "settings": {"kValue": 2}},
        ],
        "kaiConfig": {"spec": {"admission": {"gpuSharing": True}}},
    }
    objects = render(values)
    shards = by_kind(objects, "SchedulingShard")
    assert {name: s["spec"] for name, s in shards.items()} == {
        # The chart's placement fills in what a shard's settings leave out.
        "default": {
            "partitionLabelValue": "",
            "placementStrategy": {"gpu": "spread", "cpu": "binpack"},
        },
        "pool-a": {
            "partitionLabelValue": "pool-a",
            "kValue": 2,
            "placementStrategy": {"gpu": "binpack", "cpu": "binpack"},
        },
    }
    config = by_kind(objects, "Config")["kai-config"]
    assert config["apiVersion"] == "kai.scheduler/v1"
    assert config["spec"] == {
        "namespace": NAMESPACE,
        "global": {"nodePoolLabelKey": "example.com/pool", "schedulerName": "kai-scheduler"},
        "admission": {"gpuSharing": True},
        "scheduler": {"service": {"enabled": True}},
    }
    deployments = by_kind(objects, "Deployment")
    args = {
        n: d["spec"]["template"]["spec"]["containers"][0]["args"] for n, d in deployments.items()
    }
    assert args["kai-py-scheduler"][1:4] == [
        "--controllers=scheduler",
        "--shard=default",
        "--node-pool=",
    ]
    assert args["kai-py-scheduler-pool-a"][1:4] == [
        "--controllers=scheduler",
        "--shard=pool-a",
        "--node-pool=pool-a",
    ]
    assert not any(a.startswith("--shard") for a in args["kai-py-binder"])
    # Each shard's Deployment selects its own pods only; same ServiceAccount and rules.
    selectors = [str(d["spec"]["selector"]) for d in deployments.values()]
    assert len(selectors) == len(set(selectors))
    pool_a = deployments["kai-py-scheduler-pool-a"]["spec"]["template"]["spec"]
    assert pool_a["serviceAccountName"] == "kai-py-scheduler"
    # The default values: one shard, the default one, for the nodes without the label.
    assert set(by_kind(render(), "SchedulingShard")) == {"default"}


@pytest.mark.parametrize(
    ("shards", "message"),
    [
        ([{"name": "pool-a"}], "shards: needs the shard named default"),
        ([{"name": "default"}, {"name": "default"}], 'shards[1].name: "default" is given twice'),
        (
            [{"name": "default"}, {"name": "a"}],
            'shards[1].partitionLabelValue: "" is served by shard "default" already',
        ),
        ([{"name": "Pool_A"}], 'shards[0].name: "Pool_A" is not a lower-case DNS label'),
    ],
)
def test_bad_shards_are_refused_naming_the_value(shards: list[Json], message: str) -> None:
    with pytest.raises(Exception, match=re.escape(message)):
        render({"shards": shards})


def test_staggered_start_and_hami_core_reach_the_binder() -> None:
    docs = render(
        {
            "gpuSharing": {
                "staggeredStart": True,
                "staggeredStartTimeoutSeconds": 90,
                "hamiCore": True,
            }
        }
    )
    binder = by_kind(docs, "Deployment")["kai-py-binder"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in binder["containers"][0]["env"]}
    assert env["KAI_PY_STAGGERED_START"] == "true"
    assert env["KAI_PY_STAGGERED_START_TIMEOUT"] == "90"
    assert env["KAI_PY_HAMI_CORE"] == "true"
    scheduler = by_kind(render({"metrics": {"cardPods": True}}), "Deployment")["kai-py-scheduler"]
    env = {
        e["name"]: e.get("value")
        for e in scheduler["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["KAI_PY_METRICS_CARD_PODS"] == "true"


POLICIES = {
    "reservation-pods",
    "gpu-configmaps",
    "pod-metadata",
    "scheduler-pod-status",
    "scheduler-evictions",
    "bindrequests",
}


def test_admission_policies_hold_each_role_to_its_own_work(
    default: list[Json], other: list[Json]
) -> None:
    """security.yaml: each policy bound (Deny, failing closed), naming the chart's
    accounts, image and scheduler name; tests/realapi/test_security_policies.py runs them."""
    for objects, account, image, scheduler in (
        (default, "kai-py-{role}", install.DEFAULT_IMAGE, "kai-scheduler"),
        (other, "kai-py", "registry.example/kai-py:9.9.9", "my-scheduler"),
    ):
        policies = by_kind(objects, "ValidatingAdmissionPolicy")
        bindings = by_kind(objects, "ValidatingAdmissionPolicyBinding")
        assert set(policies) == set(bindings) == {f"{RELEASE}-{p}" for p in POLICIES}
        for name, binding in bindings.items():
            assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
            assert policies[name]["spec"]["failurePolicy"] == "Fail"
        text = {name[len(RELEASE) + 1 :]: yaml.safe_dump(p) for name, p in policies.items()}
        user = f"system:serviceaccount:{NAMESPACE}:" + account
        assert f"'{image}'" in text["reservation-pods"]
        assert f"'{user.format(role='binder')}'" in text["gpu-configmaps"]
        assert f"'{user.format(role='scheduler')}'" in text["bindrequests"]
        assert f"'{user.format(role='podgrouper')}'" in text["pod-metadata"]
        assert (
            f"'{scheduler}'" in text["pod-metadata"]
            and f"'{scheduler}'" in text["scheduler-pod-status"]
        )
        evictions = text["scheduler-evictions"]
        for ns in ("kube-system", NAMESPACE, "kai-resource-reservation"):
            assert f"'{ns}'" in evictions
    # The keys each account may write on pods, one list per account (single mode: both).
    single = by_kind(other, "ValidatingAdmissionPolicy")[f"{RELEASE}-pod-metadata"]
    labels = next(v for v in single["spec"]["variables"] if v["name"] == "labelKeys")
    assert "['runai-gpu-group','kai.scheduler/subgroup-name']" in labels["expression"]


def test_the_kubectl_viewer_role_reads_only_and_is_opt_in(
    default: list[Json], other: list[Json]
) -> None:
    assert f"{RELEASE}-viewer" not in by_kind(default, "ClusterRole")
    viewer = by_kind(other, "ClusterRole")[f"{RELEASE}-viewer"]
    assert _rules(viewer) == {
        ("", "pods,events,nodes", "get,list"),
        ("scheduling.run.ai", "queues,podgroups", "get,list"),
    }
    # Not aggregated into view/edit/admin: it would give their holders the Nodes.
    assert not any("aggregate" in k for k in viewer["metadata"].get("labels") or {})
    # The chart binds nobody to it: the admin binds the users.
    assert not [
        b
        for b in other
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and b["roleRef"]["name"] == f"{RELEASE}-viewer"
    ]


def test_admission_policies_can_be_left_out() -> None:
    objects = render({"security": {"admissionPolicies": False}})
    assert not [o for o in objects if "AdmissionPolicy" in o["kind"]]


def test_the_scheduler_and_the_binder_share_the_bind_key(
    default: list[Json], other: list[Json]
) -> None:
    """The key the scheduler signs BindRequests with and the binder checks them by:
    a Secret of the release, given to those two roles only."""
    for objects in (default, other):
        secret = by_kind(objects, "Secret")[f"{RELEASE}-bind-key"]
        assert len(base64.b64decode(secret["data"]["key"])) == 48
        given = {
            name
            for name, d in by_kind(objects, "Deployment").items()
            for c in d["spec"]["template"]["spec"]["containers"]
            for e in c.get("env", [])
            if e["name"] == "KAI_PY_BIND_KEY"
            and e["valueFrom"]["secretKeyRef"] == {"name": f"{RELEASE}-bind-key", "key": "key"}
        }
        expected = {"kai-py"} if objects is other else {"kai-py-scheduler", "kai-py-binder"}
        assert given == expected
