"""The chart after day one: kai-py's own pods kept apart, budgeted and prioritised,
the scheduler configuration file from a value, and webhook certificates that
render the same every time (GitOps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from chart_helpers import RELEASE, by_kind, render

from kai_py.conf.schedconfig import load_config

Json = dict[str, Any]

COMPONENTS = {
    "kai-py-scheduler": "scheduler",
    "kai-py-binder": "binder",
    "kai-py-podgrouper": "podgrouper",
    "kai-py-webhooks": "webhooks",
}


def _pod(objects: list[Json], kind: str, name: str) -> Json:
    spec: Json = by_kind(objects, kind)[name]["spec"]["template"]["spec"]
    return spec


def test_defaults_spread_replicas_and_give_kai_py_its_own_priority() -> None:
    objects = render()
    own = by_kind(objects, "PriorityClass")["kai-py-critical"]
    assert own["value"] == 1_000_000_000 and "annotations" not in own["metadata"]
    assert _pod(objects, "DaemonSet", "kai-py-node-agent")["priorityClassName"] == "kai-py-critical"
    for name, component in COMPONENTS.items():
        pod = _pod(objects, "Deployment", name)
        assert pod["priorityClassName"] == "kai-py-critical"
        assert pod["affinity"] == {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {
                                "matchLabels": {
                                    "app.kubernetes.io/instance": RELEASE,
                                    "app.kubernetes.io/component": component,
                                }
                            },
                        },
                    }
                ]
            }
        }
    # One replica each: a budget would block every drain.
    assert by_kind(objects, "PodDisruptionBudget") == {}


def test_roles_of_several_replicas_get_a_budget_and_required_spreading() -> None:
    objects = render(
        {
            "scheduler": {"replicas": 2, "resources": {}},
            "webhooks": {"replicas": 3},
            "replicaAntiAffinity": "required",
            "priorityClassName": "system-cluster-critical",
            "affinity": {"nodeAffinity": {"x": 1}},
        }
    )
    budgets = by_kind(objects, "PodDisruptionBudget")
    assert set(budgets) == {"kai-py-scheduler", "kai-py-webhooks"}
    deployments = by_kind(objects, "Deployment")
    for name, budget in budgets.items():
        assert budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"]["selector"] == deployments[name]["spec"]["selector"]
    assert "kai-py-critical" not in by_kind(objects, "PriorityClass")
    pod = _pod(objects, "Deployment", "kai-py-scheduler")
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["affinity"]["nodeAffinity"] == {"x": 1}
    [term] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "scheduler"

    # A podAntiAffinity of the user's own is used as given; none switches it off.
    theirs = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    pod = _pod(render({"affinity": theirs}), "Deployment", "kai-py-binder")
    assert pod["affinity"] == theirs
    assert "affinity" not in _pod(
        render({"replicaAntiAffinity": "none"}), "Deployment", "kai-py-binder"
    )


def test_scheduler_config_value_becomes_the_config_file_of_every_scheduler(
    tmp_path: Path,
) -> None:
    config = {
        "actions": "allocate, reclaim",
        "tiers": [
            {
                "plugins": [
                    {"name": "nodeplacement", "arguments": {"gpu": "spread", "cpu": "spread"}}
                ]
            }
        ],
        "maxNumberConsolidationPreemptees": 4,
    }
    shards = [
        {"name": "default", "partitionLabelValue": "", "settings": {}},
        {"name": "a100", "partitionLabelValue": "a100", "settings": {}},
    ]
    objects = render({"schedulerConfig": config, "shards": shards})
    data = by_kind(objects, "ConfigMap")["kai-py-scheduler-config"]["data"]["config.yaml"]
    assert yaml.safe_load(data) == config
    # The file is one kai-py reads, all of it applied.
    (tmp_path / "config.yaml").write_text(data)
    parsed = load_config(tmp_path / "config.yaml")
    assert parsed.config.actions == ("allocate", "reclaim") and parsed.warnings == []
    for name, deployment in by_kind(objects, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        if name in ("kai-py-scheduler", "kai-py-scheduler-a100"):
            assert "--config=/etc/kai-py/scheduler/config.yaml" in args
            assert mounts["scheduler-config"] == "/etc/kai-py/scheduler"
            assert volumes["scheduler-config"]["configMap"]["name"] == "kai-py-scheduler-config"
            # A changed value rolls the schedulers: the file is read at start.
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            assert "kai-py.dev/scheduler-config-sha256" in annotations
        else:
            assert (
                not any(a.startswith("--config") for a in args) and "scheduler-config" not in mounts
            )
    changed = render({"schedulerConfig": {**config, "actions": "allocate"}, "shards": shards})
    digest = "kai-py.dev/scheduler-config-sha256"

    def annotation(objs: list[Json]) -> str:
        meta = by_kind(objs, "Deployment")["kai-py-scheduler"]["spec"]["template"]["metadata"]
        return str(meta["annotations"][digest])

    assert annotation(changed) != annotation(objects)
    # Without the value: no ConfigMap, no --config (the built-in defaults).
    default = render()
    assert "kai-py-scheduler-config" not in by_kind(default, "ConfigMap")
    args = by_kind(default, "Deployment")["kai-py-scheduler"]["spec"]["template"]["spec"]
    assert not any(a.startswith("--config") for a in args["containers"][0]["args"])


def _webhook_configs(objects: list[Json]) -> list[Json]:
    return [
        *by_kind(objects, "MutatingWebhookConfiguration").values(),
        *by_kind(objects, "ValidatingWebhookConfiguration").values(),
    ]


def _tls_volume(objects: list[Json]) -> str:
    pod = by_kind(objects, "Deployment")["kai-py-webhooks"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    return str(volumes["tls"]["secret"]["secretName"])


def test_webhook_certificates_from_a_given_secret_render_the_same_every_time() -> None:
    ca = "TUlJQ0NBIG9mIHRoZSB1c2Vy"  # any base64: the chart passes it on as it is
    values = {
        "webhooks": {"tls": {"mode": "secret", "secretName": "my-tls", "caBundle": ca}},
        # The bind key is made by the chart too unless given (below).
        "security": {"bindKeySecret": "my-bind-key"},
    }
    first, second = render(values), render(values)
    assert first == second  # `helm template` twice: nothing for Argo CD or Flux to rotate
    hooks = [h for c in _webhook_configs(first) for h in c["webhooks"]]
    assert {h["clientConfig"]["caBundle"] for h in hooks} == {ca}
    assert "kai-py-webhooks-tls" not in by_kind(first, "Secret")  # the user's, not the chart's
    assert _tls_volume(first) == "my-tls"
    # The Helm-made certificate is new on every render without a cluster to look up.
    assert render() != render()


def test_a_secret_without_its_ca_is_refused_naming_the_value() -> None:
    with pytest.raises(helm.HelmError) as err:
        render({"webhooks": {"tls": {"mode": "secret"}}})
    assert "values: webhooks.tls.caBundle: empty" in str(err.value)


def test_webhook_certificates_from_cert_manager() -> None:
    values = {
        "webhooks": {"tls": {"mode": "certManager"}},
        "security": {"bindKeySecret": "my-bind-key"},
    }
    objects = render(values)
    assert objects == render(values)
    assert set(by_kind(objects, "Issuer")) == {"kai-py-selfsigned", "kai-py-webhooks-ca"}
    certificates = by_kind(objects, "Certificate")
    serving = certificates["kai-py-webhooks"]["spec"]
    assert serving["secretName"] == _tls_volume(objects) == "kai-py-webhooks-tls"
    assert "kai-py-webhooks.kai-system.svc" in serving["dnsNames"]
    assert serving["issuerRef"] == {"kind": "Issuer", "name": "kai-py-webhooks-ca"}
    assert certificates["kai-py-webhooks-ca"]["spec"]["isCA"] is True
    for config in _webhook_configs(objects):
        assert config["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "kai-system/kai-py-webhooks"
        }
        assert all("caBundle" not in h["clientConfig"] for h in config["webhooks"])
    assert "kai-py-webhooks-tls" not in by_kind(objects, "Secret")
    # An issuer of the user's: only the serving Certificate is made.
    theirs = {"kind": "ClusterIssuer", "name": "corp-ca"}
    objects = render(
        {"webhooks": {"tls": {"mode": "certManager", "certManager": {"issuerRef": theirs}}}}
    )
    assert set(by_kind(objects, "Certificate")) == {"kai-py-webhooks"} and not by_kind(
        objects, "Issuer"
    )
    assert by_kind(objects, "Certificate")["kai-py-webhooks"]["spec"]["issuerRef"] == theirs


def test_a_given_bind_key_secret_is_used_and_none_is_made() -> None:
    """Without it every `helm template` makes a new bind key: a GitOps sync would give
    the scheduler and the binder different keys as their pods restart."""
    assert render({}) != render({})  # the made key differs per render
    objects = render({"security": {"bindKeySecret": "my-bind-key"}})
    assert "kai-bind-key" not in by_kind(objects, "Secret")
    refs = {
        name: e["valueFrom"]["secretKeyRef"]
        for name, d in by_kind(objects, "Deployment").items()
        for c in d["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", [])
        if e["name"] == "KAI_PY_BIND_KEY"
    }
    assert refs == {
        role: {"name": "my-bind-key", "key": "key"}
        for role in ("kai-py-scheduler", "kai-py-binder")
    }
