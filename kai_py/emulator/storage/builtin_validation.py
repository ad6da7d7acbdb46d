"""Defaults and validation of built-in kinds, where cheap and useful to clients.

Only what clients of a scheduler run into is checked: object names, label
values, pod containers and pod spec immutability, workload selectors,
PriorityClass values, Node pod CIDRs. Messages use the apimachinery wording.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from kai_py.emulator import cron
from kai_py.emulator.storage.errors import FieldError
from kai_py.emulator.storage.resources import ResourceType

JSON = dict[str, Any]

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)

#: Kinds whose names must be DNS labels rather than subdomains.
_LABEL_NAMED = frozenset({"namespaces", "services"})


def validate_metadata(rt: ResourceType, obj: JSON, old: JSON | None) -> list[FieldError]:
    meta = obj.get("metadata") or {}
    errors: list[FieldError] = []
    name = meta.get("name", "")
    if old is None:
        if rt.storage_key in _LABEL_NAMED:
            if not _LABEL.match(name) or len(name) > 63:
                errors.append(FieldError("metadata.name", "FieldValueInvalid", _LABEL_MSG, name))
        elif not _SUBDOMAIN.match(name) or len(name) > 253:
            errors.append(FieldError("metadata.name", "FieldValueInvalid", _SUBDOMAIN_MSG, name))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        errors.append(
            FieldError(
                "metadata.labels", "FieldValueTypeInvalid", "must be a map of strings", labels
            )
        )
        return errors
    for key, value in labels.items():
        if not isinstance(value, str):
            errors.append(
                FieldError(
                    "metadata.labels",
                    "FieldValueTypeInvalid",
                    "label values must be strings",
                    value,
                )
            )
        elif len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(
                FieldError("metadata.labels", "FieldValueInvalid", _LABEL_VALUE_MSG, value)
            )
        name_part = key.rsplit("/", 1)[-1]
        if not _QUALIFIED_NAME.match(name_part) or len(name_part) > 63:
            errors.append(
                FieldError(
                    "metadata.labels",
                    "FieldValueInvalid",
                    "name part must consist of alphanumeric characters, '-', "
                    "'_' or '.', and must start and end with an alphanumeric "
                    "character",
                    key,
                )
            )
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, dict):
        for key, value in annotations.items():
            if not isinstance(value, str):
                errors.append(
                    FieldError(
                        "metadata.annotations",
                        "FieldValueTypeInvalid",
                        "annotation values must be strings",
                        key,
                    )
                )
    errors.extend(_owner_references(meta.get("ownerReferences")))
    return errors


def _owner_references(refs: Any) -> list[FieldError]:
    if not refs:
        return []
    if not isinstance(refs, list):
        return [
            FieldError("metadata.ownerReferences", "FieldValueTypeInvalid", "must be a list", refs)
        ]
    errors = []
    for ref in refs:
        if not isinstance(ref, dict):
            errors.append(
                FieldError(
                    "metadata.ownerReferences", "FieldValueTypeInvalid", "must be an object", ref
                )
            )
            continue
        for field in ("apiVersion", "kind", "name"):
            if not ref.get(field):
                errors.append(
                    FieldError(
                        f"metadata.ownerReferences.{field}",
                        "FieldValueInvalid",
                        f"{field} must not be empty",
                        ref.get(field, ""),
                    )
                )
        if not ref.get("uid"):
            errors.append(
                FieldError(
                    "metadata.ownerReferences.uid",
                    "FieldValueInvalid",
                    "uid must not be empty",
                    ref.get("uid", ""),
                )
            )
    controllers = [r for r in refs if isinstance(r, dict) and r.get("controller")]
    if len(controllers) > 1:
        errors.append(
            FieldError(
                "metadata.ownerReferences",
                "FieldValueInvalid",
                "Only one reference can have Controller set to true. Found "
                f'"true" in references for {controllers[0].get("kind")}/'
                f"{controllers[0].get('name')} and {controllers[1].get('kind')}/"
                f"{controllers[1].get('name')}",
                refs,
                has_value=False,
            )
        )
    return errors


def apply_defaults(rt: ResourceType, obj: JSON, old: JSON | None) -> None:
    defaults = _DEFAULTERS.get(rt.storage_key)
    if defaults is not None:
        defaults(obj, old)


def validate(rt: ResourceType, obj: JSON, old: JSON | None) -> list[FieldError]:
    check = _VALIDATORS.get(rt.storage_key)
    return check(obj, old) if check is not None else []


# ---- pods ---------------------------------------------------------------------------------


def _pod_defaults(obj: JSON, old: JSON | None) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if "serviceAccountName" not in spec:
        spec["serviceAccountName"] = spec.get("serviceAccount") or "default"
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(c, dict):
            resources = c.setdefault("resources", {})
            limits = resources.get("limits") if isinstance(resources, dict) else None
            if isinstance(limits, dict) and limits:
                # As SetDefaults_Pod (pods only, not templates): a resource with a limit
                # and no request is requested at its limit.
                requests = resources.get("requests")
                if not isinstance(requests, dict):
                    requests = resources["requests"] = {}
                for name, value in limits.items():
                    requests.setdefault(name, value)
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            image = str(c.get("image", ""))
            c.setdefault(
                "imagePullPolicy",
                "Always"
                if image.endswith(":latest") or ":" not in image.rsplit("/", 1)[-1]
                else "IfNotPresent",
            )
    if old is None:
        status = obj.setdefault("status", {})
        if isinstance(status, dict):
            status.setdefault("phase", "Pending")
            status.setdefault("qosClass", _qos_class(spec))
            if spec.get("schedulingGates") and not status.get("conditions"):
                # As kube-apiserver: a gated pod says so from its creation.
                created = (obj.get("metadata") or {}).get("creationTimestamp")
                status["conditions"] = [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "lastProbeTime": None,
                        "lastTransitionTime": created,
                        "reason": "SchedulingGated",
                        "message": "Scheduling is blocked due to non-empty scheduling gates",
                    }
                ]


def _qos_class(spec: JSON) -> str:
    requests_set = limits_set = False
    guaranteed = True
    for c in spec.get("containers") or []:
        res = c.get("resources") or {} if isinstance(c, dict) else {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            requests_set = requests_set or bool(req)
            limits_set = limits_set or bool(lim)
        for r in ("cpu", "memory"):
            want = req.get(r, lim.get(r))
            if r not in lim or want != lim.get(r):
                guaranteed = False
    if not requests_set and not limits_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


_POD_MUTABLE = (
    "activeDeadlineSeconds",
    "tolerations",
    "schedulingGates",
    "terminationGracePeriodSeconds",
)


def _pod_validate(obj: JSON, old: JSON | None) -> list[FieldError]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [FieldError("spec", "FieldValueRequired", "")]
    errors: list[FieldError] = []
    containers = spec.get("containers")
    if not containers:
        errors.append(FieldError("spec.containers", "FieldValueRequired", ""))
    elif not isinstance(containers, list):
        errors.append(
            FieldError("spec.containers", "FieldValueTypeInvalid", "must be a list", containers)
        )
    else:
        names: set[str] = set()
        for i, c in enumerate(containers):
            if not isinstance(c, dict):
                errors.append(
                    FieldError(
                        f"spec.containers[{i}]", "FieldValueTypeInvalid", "must be an object", c
                    )
                )
                continue
            if not c.get("name"):
                errors.append(FieldError(f"spec.containers[{i}].name", "FieldValueRequired", ""))
            elif c["name"] in names:
                errors.append(
                    FieldError(f"spec.containers[{i}].name", "FieldValueDuplicate", "", c["name"])
                )
            names.add(c.get("name", ""))
            if not c.get("image") and old is None:
                errors.append(FieldError(f"spec.containers[{i}].image", "FieldValueRequired", ""))
    if old is not None and isinstance(old.get("spec"), dict):
        errors.extend(_pod_update(spec, old["spec"]))
    return errors


def _strip_mutable(spec: JSON) -> JSON:
    out = {k: v for k, v in spec.items() if k not in _POD_MUTABLE}
    for field in ("containers", "initContainers"):
        if isinstance(out.get(field), list):
            out[field] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                for c in out[field]
            ]
    return out


def _pod_update(spec: JSON, old_spec: JSON) -> list[FieldError]:
    # Most pod writes (status, labels, annotations, binding) leave the spec as it was.
    if spec == old_spec or _strip_mutable(spec) == _strip_mutable(old_spec):
        return []
    return [
        FieldError(
            "spec",
            "FieldValueForbidden",
            "pod updates may not change fields other than `spec.containers[*].image`,"
            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
            "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
            "(allow it to be set to 1 if it was previously negative)",
        )
    ]


# ---- workloads ----------------------------------------------------------------------------


def _job_defaults(obj: JSON, old: JSON | None) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    if "completions" not in spec and "parallelism" not in spec:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False) if False else None
    uid = (obj.get("metadata") or {}).get("uid", "")
    name = (obj.get("metadata") or {}).get("name", "")
    template = spec.setdefault("template", {})
    if old is None and not spec.get("manualSelector") and isinstance(template, dict):
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.setdefault("batch.kubernetes.io/controller-uid", uid)
        labels.setdefault("batch.kubernetes.io/job-name", name)
        labels.setdefault("controller-uid", uid)
        labels.setdefault("job-name", name)
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    if isinstance(template, dict):
        tspec = template.get("spec")
        if isinstance(tspec, dict):
            _pod_template_defaults(tspec, restart="Never")


def _pod_template_defaults(tspec: JSON, restart: str = "Always") -> None:
    tspec.setdefault("restartPolicy", restart)
    tspec.setdefault("terminationGracePeriodSeconds", 30)
    tspec.setdefault("dnsPolicy", "ClusterFirst")
    tspec.setdefault("schedulerName", "default-scheduler")
    tspec.setdefault("securityContext", {})


def _deployment_defaults(obj: JSON, old: JSON | None) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    spec.setdefault(
        "strategy",
        {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
    )
    tspec = (spec.get("template") or {}).get("spec")
    if isinstance(tspec, dict):
        _pod_template_defaults(tspec)


def _replicaset_defaults(obj: JSON, old: JSON | None) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        tspec = (spec.get("template") or {}).get("spec")
        if isinstance(tspec, dict):
            _pod_template_defaults(tspec)


def _statefulset_defaults(obj: JSON, old: JSON | None) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault(
        "updateStrategy",
        {"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 1}},
    )
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault(
        "persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"}
    )
    tspec = (spec.get("template") or {}).get("spec")
    if isinstance(tspec, dict):
        _pod_template_defaults(tspec)


def _selector_validate(obj: JSON, old: JSON | None) -> list[FieldError]:
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    if not selector:
        return [FieldError("spec.selector", "FieldValueRequired", "")]
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    match = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in match.items()):
        rendered = (
            "map[string]string{"
            + ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items()))
            + "}"
        )
        return [
            FieldError(
                "spec.template.metadata.labels",
                "FieldValueInvalid",
                "`selector` does not match template `labels`",
                rendered,
                has_value=True,
            )
        ]
    if old is not None and (old.get("spec") or {}).get("selector") != selector:
        return [FieldError("spec.selector", "FieldValueInvalid", "field is immutable", selector)]
    return []


def _job_validate(obj: JSON, old: JSON | None) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    template = spec.get("template") or {}
    if not (template.get("spec") or {}).get("containers"):
        errors.append(FieldError("spec.template.spec.containers", "FieldValueRequired", ""))
    restart = (template.get("spec") or {}).get("restartPolicy")
    if restart not in (None, "Never", "OnFailure"):
        errors.append(
            FieldError(
                "spec.template.spec.restartPolicy",
                "FieldValueNotSupported",
                'supported values: "OnFailure", "Never"',
                restart,
            )
        )
    if old is not None and (old.get("spec") or {}).get("template") != template:
        errors.append(
            FieldError(
                "spec.template",
                "FieldValueInvalid",
                "field is immutable",
                template,
                has_value=False,
            )
        )
    return errors


def _cronjob_defaults(obj: JSON, old: JSON | None) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    tspec = (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    if isinstance(tspec, dict):
        # A pod template's default ("Always"), which the Job rules below then refuse.
        _pod_template_defaults(tspec)


def _cronjob_validate(obj: JSON, old: JSON | None) -> list[FieldError]:
    """As kube-apiserver: the schedule must parse, and its Job template must be a Job's."""
    spec = obj.get("spec") or {}
    old_spec = (old or {}).get("spec") or {}
    errors: list[FieldError] = []
    name = (obj.get("metadata") or {}).get("name", "")
    if old is None and len(name) > 52:
        # The Job's name adds "-" and the minute (11 characters) and must stay a DNS label.
        errors.append(
            FieldError(
                "metadata.name", "FieldValueInvalid", "must be no more than 52 characters", name
            )
        )
    schedule = spec.get("schedule")
    if not schedule:
        errors.append(FieldError("spec.schedule", "FieldValueRequired", ""))
    else:
        text = str(schedule)
        try:
            cron.parse(text)
        except cron.CronError as exc:
            errors.append(FieldError("spec.schedule", "FieldValueInvalid", str(exc), text))
        tz_before = "TZ" in str(old_spec.get("schedule") or "")
        if "TZ" in text and not tz_before:
            errors.append(
                FieldError(
                    "spec.schedule",
                    "FieldValueInvalid",
                    "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                    text,
                )
            )
        elif "TZ" in text and spec.get("timeZone") is not None:
            errors.append(
                FieldError(
                    "spec.schedule",
                    "FieldValueInvalid",
                    "cannot use both timeZone field and TZ or CRON_TZ in schedule",
                    text,
                )
            )
    errors.extend(_non_negative(spec, "startingDeadlineSeconds"))
    zone = spec.get("timeZone")
    if zone is not None and (old is None or old_spec.get("timeZone") != zone):
        if zone == "":
            detail = "timeZone must be nil or non-empty string"
        elif str(zone).lower() == "local":
            detail = (
                "timeZone must be an explicit time zone as defined in "
                "https://www.iana.org/time-zones"
            )
        else:
            try:
                cron.load_zone(str(zone))
                detail = ""
            except cron.CronError as exc:
                detail = str(exc)
        if detail:
            errors.append(FieldError("spec.timeZone", "FieldValueInvalid", detail, zone))
    policy = spec.get("concurrencyPolicy")
    if policy not in ("Allow", "Forbid", "Replace"):
        errors.append(
            FieldError(
                "spec.concurrencyPolicy",
                "FieldValueNotSupported",
                'supported values: "Allow", "Forbid", "Replace"',
                policy,
            )
        )
    tspec = (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get(
        "spec"
    ) or {}
    path = "spec.jobTemplate.spec.template.spec"
    if not tspec.get("containers"):
        errors.append(FieldError(f"{path}.containers", "FieldValueRequired", ""))
    if tspec.get("restartPolicy") not in ("OnFailure", "Never"):
        errors.append(
            FieldError(
                f"{path}.restartPolicy", "FieldValueRequired", 'valid values: "OnFailure", "Never"'
            )
        )
    errors.extend(_non_negative(spec, "successfulJobsHistoryLimit"))
    errors.extend(_non_negative(spec, "failedJobsHistoryLimit"))
    return errors


def _non_negative(spec: JSON, field: str) -> list[FieldError]:
    value = spec.get(field)
    if isinstance(value, int) and value < 0:
        return [
            FieldError(
                f"spec.{field}", "FieldValueInvalid", "must be greater than or equal to 0", value
            )
        ]
    return []


def _priorityclass_defaults(obj: JSON, old: JSON | None) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


def _priorityclass_validate(obj: JSON, old: JSON | None) -> list[FieldError]:
    if "value" not in obj:
        return [FieldError("value", "FieldValueRequired", "")]
    if old is not None and old.get("value") != obj.get("value"):
        return [FieldError("value", "FieldValueForbidden", "may not be changed in an update.")]
    return []


def _node_validate(obj: JSON, old: JSON | None) -> list[FieldError]:
    """spec.podCIDRs must be CIDRs (a fleet once made 10.244.256.0/24, which a real API
    server refuses and the emulator took)."""
    spec = obj.get("spec") or {}
    cidrs = spec.get("podCIDRs") or []
    errors: list[FieldError] = []
    for i, cidr in enumerate(cidrs if isinstance(cidrs, list) else []):
        try:
            ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            errors.append(
                FieldError(
                    f"spec.podCIDRs[{i}]",
                    "FieldValueInvalid",
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                    cidr,
                )
            )
    return errors


def _namespace_defaults(obj: JSON, old: JSON | None) -> None:
    meta = obj.setdefault("metadata", {})
    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
    if old is None:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {})["phase"] = "Active"


def _crd_validate(obj: JSON, old: JSON | None) -> list[FieldError]:
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    errors: list[FieldError] = []
    name = (obj.get("metadata") or {}).get("name", "")
    if not spec.get("group"):
        errors.append(FieldError("spec.group", "FieldValueRequired", ""))
    if not names.get("plural"):
        errors.append(FieldError("spec.names.plural", "FieldValueRequired", ""))
    if not names.get("kind"):
        errors.append(FieldError("spec.names.kind", "FieldValueRequired", ""))
    if names.get("plural") and spec.get("group") and name != f"{names['plural']}.{spec['group']}":
        errors.append(
            FieldError(
                "metadata.name",
                "FieldValueInvalid",
                'must be spec.names.plural+"."+spec.group',
                name,
            )
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errors.append(
            FieldError(
                "spec.scope",
                "FieldValueNotSupported",
                'supported values: "Cluster", "Namespaced"',
                spec.get("scope"),
            )
        )
    versions = spec.get("versions") or []
    if not versions or sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(
            FieldError(
                "spec.versions",
                "FieldValueInvalid",
                "must have exactly one version marked as storage version",
                versions,
                has_value=False,
            )
        )
    if old is not None and (old.get("spec") or {}).get("scope") != spec.get("scope"):
        errors.append(
            FieldError("spec.scope", "FieldValueInvalid", "field is immutable", spec.get("scope"))
        )
    return errors


def _secret_defaults(obj: JSON, old: JSON | None) -> None:
    if not obj.get("type"):
        obj["type"] = "Opaque"
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        import base64

        data = obj.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def _service_defaults(obj: JSON, old: JSON | None) -> None:
    spec = obj.setdefault("spec", {})
    if old is not None and isinstance(spec, dict):
        # As patchAllocatedValues: an update that leaves the allocated IPs out keeps them.
        old_spec = old.get("spec") or {}
        for field in ("clusterIP", "clusterIPs"):
            if not spec.get(field) and old_spec.get(field):
                spec[field] = old_spec[field]


# ---- storage --------------------------------------------------------------------------------


def _persistentvolume_defaults(obj: JSON, old: JSON | None) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        spec.setdefault("volumeMode", "Filesystem")
    if old is None:
        status = obj.setdefault("status", {})
        if isinstance(status, dict):
            status.setdefault("phase", "Pending")


def _persistentvolumeclaim_defaults(obj: JSON, old: JSON | None) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("volumeMode", "Filesystem")
    if old is None:
        status = obj.setdefault("status", {})
        if isinstance(status, dict):
            status.setdefault("phase", "Pending")


def _storageclass_defaults(obj: JSON, old: JSON | None) -> None:
    obj.setdefault("reclaimPolicy", "Delete")
    obj.setdefault("volumeBindingMode", "Immediate")


_DEFAULTERS = {
    "secrets": _secret_defaults,
    "services": _service_defaults,
    "pods": _pod_defaults,
    "jobs.batch": _job_defaults,
    "cronjobs.batch": _cronjob_defaults,
    "deployments.apps": _deployment_defaults,
    "replicasets.apps": _replicaset_defaults,
    "priorityclasses.scheduling.k8s.io": _priorityclass_defaults,
    "namespaces": _namespace_defaults,
    "persistentvolumes": _persistentvolume_defaults,
    "persistentvolumeclaims": _persistentvolumeclaim_defaults,
    "statefulsets.apps": _statefulset_defaults,
    "storageclasses.storage.k8s.io": _storageclass_defaults,
}
_VALIDATORS = {
    "pods": _pod_validate,
    "jobs.batch": _job_validate,
    "cronjobs.batch": _cronjob_validate,
    "deployments.apps": _selector_validate,
    "replicasets.apps": _selector_validate,
    "priorityclasses.scheduling.k8s.io": _priorityclass_validate,
    "customresourcedefinitions.apiextensions.k8s.io": _crd_validate,
    "nodes": _node_validate,
}
