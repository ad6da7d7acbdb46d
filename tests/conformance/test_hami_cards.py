"""HAMi v2.10's rules for fitting and choosing cards, from HAMi's own unit tests.

Each case names the HAMi v2.10.0 test function and row (its ``name``, or the
assertion it comes from) that it restates as kai-py input: pod annotations and
resources as a HAMi user writes them, Nodes with kai-py's inventory or HAMi's
``hami.io/node-nvidia-register``, run through the same code as ``kai-py
simulate``. The data are kai-py's own (UUIDs in kai-py's ``GPU-<hex>`` form,
MiB sizes kept where they decide the outcome). Rows that only test HAMi's
internals (its score arithmetic, NUMA and topology sorting, vendor types,
ResourceQuota, the time-slicing count) are not restated. A case kai-py
decides differently on purpose is marked xfail with the reason, and is listed
under "HAMi" in KNOWN-DIFFERENCES.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from kai_py.api.objects import WorkloadError
from kai_py.gpu import hami, inventory, pins
from kai_py.scheduler.model import Card, Config
from kai_py.simulate.simulation import Simulation, to_json
from kai_py.state.documents import Document
from tests.conformance.kai_cases import KNOWN_DIFFERENCES

# ------------------------------------------------------------------ pins
USE_UUID = "nvidia.com/use-gpuuuid"
NOUSE_UUID = "nvidia.com/nouse-gpuuuid"
USE_TYPE = "nvidia.com/use-gputype"
NOUSE_TYPE = "nvidia.com/nouse-gputype"


@dataclass(frozen=True)
class PinCase:
    source: str  # HAMi v2.10.0 test function / row
    annotations: dict[str, str]
    card: Card
    allowed: bool


def _card(uuid: str = "GPU-abc", product: str = "NVIDIA-A100") -> Card:
    return Card(index=0, uuid=uuid, product=product, memory_mib=8000)


PIN_CASES = [
    # pkg/device/devices_test.go
    PinCase("TestCheckUUID/don't set GPUUseUUID and GPUNoUseUUID annotation", {}, _card(), True),
    PinCase(
        "TestCheckUUID/use set GPUUseUUID don't set GPUNoUseUUID annotation,device match",
        {USE_UUID: "GPU-abc,GPU-123"},
        _card(),
        True,
    ),
    PinCase(
        "TestCheckUUID/use set GPUUseUUID don't set GPUNoUseUUID annotation,device don't match",
        {USE_UUID: "GPU-abc,GPU-123"},
        _card("GPU-1abc"),
        False,
    ),
    PinCase(
        "TestCheckUUID/use don't set GPUUseUUID set GPUNoUseUUID annotation,device match",
        {NOUSE_UUID: "GPU-abc,GPU-123"},
        _card(),
        False,
    ),
    PinCase(
        "TestCheckUUID/use don't set GPUUseUUID set GPUNoUseUUID annotation,device  don't match",
        {NOUSE_UUID: "GPU-abc,GPU-123"},
        _card("GPU-1abc"),
        True,
    ),
    PinCase(
        "TestCheckUUID/both GPUUseUUID and GPUNoUseUUID set, device in use list but also in "
        "nouse list",
        {USE_UUID: "GPU-abc,GPU-123", NOUSE_UUID: "GPU-abc"},
        _card(),
        False,
    ),
    PinCase(
        "TestCheckUUID/both GPUUseUUID and GPUNoUseUUID set, device in use list and not in "
        "nouse list",
        {USE_UUID: "GPU-abc,GPU-123", NOUSE_UUID: "GPU-456"},
        _card(),
        True,
    ),
    PinCase(
        "TestCheckUUID/use list with spaces around uuids, device matches after trim",
        {USE_UUID: " GPU-abc , GPU-123 "},
        _card(),
        True,
    ),
    PinCase(
        "TestCheckUUID/empty GPUUseUUID annotation should not filter out any device",
        {USE_UUID: ""},
        _card(),
        True,
    ),
    PinCase(
        "TestCheckUUID/whitespace-only GPUUseUUID annotation should not filter out any device",
        {USE_UUID: "   "},
        _card(),
        True,
    ),
    PinCase(
        "TestCheckUUID/empty GPUNoUseUUID annotation should not exclude any device",
        {NOUSE_UUID: ""},
        _card(),
        True,
    ),
    PinCase("TestCheckType/no annotation is no constraint", {}, _card(), True),
    PinCase("TestCheckType/use list matches by substring", {USE_TYPE: "A100,V100"}, _card(), True),
    PinCase("TestCheckType/use list does not match", {USE_TYPE: "V100"}, _card(), False),
    PinCase(
        "TestCheckType/nouse list matches excludes the device", {NOUSE_TYPE: "A100"}, _card(), False
    ),
    PinCase(
        "TestCheckType/nouse list does not match keeps the device",
        {NOUSE_TYPE: "V100"},
        _card(),
        True,
    ),
    PinCase("TestCheckType/empty use value is no constraint", {USE_TYPE: ""}, _card(), True),
    PinCase(
        "TestCheckType/whitespace-only nouse value excludes nothing",
        {NOUSE_TYPE: "   "},
        _card(),
        True,
    ),
    PinCase(
        "TestCheckType/use satisfied and nouse matches still excludes",
        {USE_TYPE: "A100", NOUSE_TYPE: "A100"},
        _card(),
        False,
    ),
    PinCase(
        "TestCheckType/nouse with trailing comma only excludes named type",
        {NOUSE_TYPE: "V100,"},
        _card(),
        True,
    ),
    PinCase(
        "TestCheckType/nouse with leading comma only excludes named type",
        {NOUSE_TYPE: ",V100"},
        _card(),
        True,
    ),
    PinCase(
        "TestCheckType/use with trailing comma matches named type only",
        {USE_TYPE: "V100,"},
        _card(),
        False,
    ),
    # pkg/device/nvidia/device_test.go
    PinCase(
        "Test_checkType/use set GPUInUse don't set GPUNoUse annotation,device match",
        {USE_TYPE: "A10"},
        _card(product="NVIDIA A100"),
        True,
    ),
    PinCase(
        "Test_checkType/use set GPUInUse set GPUNoUse annotation,device don't match",
        {USE_TYPE: "A10", NOUSE_TYPE: "A100"},
        _card(product="NVIDIA A100"),
        False,
    ),
    PinCase(
        "Test_checkType/use set GPUInUse set GPUNoUse annotation,device match",
        {USE_TYPE: "A10", NOUSE_TYPE: "A100"},
        _card(product="NVIDIA A10"),
        True,
    ),
    PinCase("TestCheckGPUtype_NoUse/A100 card", {NOUSE_TYPE: "A100"}, _card(), False),
    PinCase(
        "TestCheckGPUtype_NoUse/V100 card",
        {NOUSE_TYPE: "A100"},
        _card(product="NVIDIA-V100"),
        True,
    ),
    PinCase("TestCheckGPUtype_EmptyAnnotation/empty use", {USE_TYPE: ""}, _card(), True),
    PinCase("TestCheckGPUtype_EmptyAnnotation/blank use", {USE_TYPE: "   "}, _card(), True),
    PinCase("TestCheckGPUtype_EmptyAnnotation/empty nouse", {NOUSE_TYPE: ""}, _card(), True),
    PinCase("TestCheckGPUtype_EmptyAnnotation/blank nouse", {NOUSE_TYPE: "   "}, _card(), True),
    PinCase(
        "TestCheckGPUtype_InUseMismatch",
        {USE_TYPE: "A100"},
        _card(product="NVIDIA-V100"),
        False,
    ),
]


def _pod(annotations: dict[str, str] | None = None, **limits: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "annotations": dict(annotations or {})},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "c", "resources": {"limits": dict(limits)}}],
        },
    }


@pytest.mark.parametrize("case", PIN_CASES, ids=[c.source for c in PIN_CASES])
def test_pin_rows(case: PinCase) -> None:
    pin = pins.pin_of(_pod(case.annotations))
    assert (pin is None or pin.allows(case.card)) is case.allowed


# ------------------------------------------------------------------ registration
GPU = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4"


@dataclass(frozen=True)
class RegisterCase:
    source: str
    raw: str
    # (index, uuid, MiB, healthy) of each card, or the words of the refusal
    cards: list[tuple[int, str, int, bool]] | None = None
    refused: str = ""


REGISTER_CASES = [
    # pkg/device/devices_test.go, Test_DecodeNodeDevices
    RegisterCase("Test_DecodeNodeDevices/args is empty", "", refused="no ':' between devices"),
    RegisterCase("Test_DecodeNodeDevices/args is only delimiter", ":", cards=[]),
    RegisterCase("Test_DecodeNodeDevices/args is multiple delimiters", "::", cards=[]),
    RegisterCase("Test_DecodeNodeDevices/args missing delimiter with comma", ",", refused="no ':'"),
    RegisterCase(
        "Test_DecodeNodeDevices/args has comma and delimiter but empty fields",
        ",:",
        refused="device 0 has 2 fields, 7 or 9 expected",
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/args is invalid format missing split symbol", "a", refused="no ':'"
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/str is old format",
        f"{GPU},10,7680,100,NVIDIA-Tesla P4,0,true:",
        cards=[(0, GPU, 7680, True)],
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/str is new format",
        f"{GPU},10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:",
        cards=[(1, GPU, 7680, True)],
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/malformed segment without comma",
        "garbage:",
        refused="device 0 has 1 fields",
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/invalid count field",
        f"{GPU},notanint,7680,100,NVIDIA-Tesla P4,0,true:",
        refused="device 0: count 'notanint' is not a whole number",
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/invalid memory field",
        f"{GPU},10,notanint,100,NVIDIA-Tesla P4,0,true:",
        refused="device 0: memory 'notanint' is not a whole number",
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/invalid core field",
        f"{GPU},10,7680,notanint,NVIDIA-Tesla P4,0,true:",
        refused="device 0: cores 'notanint' is not a whole number",
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/invalid numa field",
        f"{GPU},10,7680,100,NVIDIA-Tesla P4,notanint,true:",
        refused="device 0: numa 'notanint' is not a whole number",
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/invalid health field",
        f"{GPU},10,7680,100,NVIDIA-Tesla P4,0,notabool:",
        refused="device 0: health 'notabool' is not true or false",
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/unexpected field count",
        f"{GPU},10,7680,100,NVIDIA-Tesla P4:",
        refused="device 0 has 5 fields, 7 or 9 expected",
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/invalid index field in new format",
        f"{GPU},10,7680,100,NVIDIA-Tesla P4,0,true,notanint,hami-core:",
        refused="device 0: index 'notanint' is not a whole number",
    ),
    RegisterCase(
        "Test_DecodeNodeDevices/negative index field in new format",
        f"{GPU},10,7680,100,NVIDIA-Tesla P4,0,true,-1,hami-core:",
        refused="device 0: index -1 is negative",
    ),
    RegisterCase(
        "TestDecodeNodeDevicesLegacyFormat",
        f"{GPU},10,7680,100,NVIDIA-Tesla P4,0,true:",
        cards=[(0, GPU, 7680, True)],
    ),
    # pkg/device/devices_test.go, TestUnMarshalNodeDevices
    RegisterCase(
        "TestUnMarshalNodeDevices/test one",
        '[{"index":1,"id":"GPU-1","count":1,"devmem":1024,"devcore":10,"type":"type",'
        '"health":true}]\n',
        cards=[(1, "GPU-1", 1024, True)],
    ),
    RegisterCase(
        "TestUnMarshalNodeDevices/test two",
        '[{"index":1,"id":"GPU-1","count":1,"devmem":1024,"devcore":10,"type":"type",'
        '"health":true},{"index":2,"id":"GPU-2","count":2,"devmem":4096,"devcore":20,'
        '"type":"type2","health":false}]',
        cards=[(1, "GPU-1", 1024, True), (2, "GPU-2", 4096, False)],
    ),
    # pkg/device/nvidia/device_test.go
    RegisterCase(
        "Test_GetNodeDevices/exist gpu devices",
        '[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4",'
        '"numa":0,"health":true,"index":0}]',
        cards=[(0, "GPU-0", 8192, True)],
    ),
    RegisterCase("Test_GetNodeDevices/no gpu devices", "[]", cards=[]),
    RegisterCase("TestGetNodeDevices_InvalidJSON", "not-valid-json", refused="no ':'"),
]


@pytest.mark.parametrize("case", REGISTER_CASES, ids=[c.source for c in REGISTER_CASES])
def test_registration_rows(case: RegisterCase) -> None:
    if case.refused:
        with pytest.raises(inventory.InventoryError) as caught:
            inventory.parse_hami_register(case.raw)
        assert "hami.io/node-nvidia-register" in str(caught.value)
        assert case.refused in str(caught.value)
        return
    got = inventory.parse_hami_register(case.raw)
    assert [(c.index, c.uuid, c.memory_mib, c.healthy) for c in got] == case.cards


# ------------------------------------------------------------------ admission
@dataclass(frozen=True)
class AdmissionCase:
    source: str
    limits: dict[str, str]
    # what the pod becomes: "whole N" (N whole cards), a gpu-fraction, or the refusal
    becomes: str


ADMISSION_CASES = [
    AdmissionCase(
        "Test_MutateAdmission_MemoryPercentageValidation/percentage of 0 is accepted",
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"},
        "whole 1",
    ),
    AdmissionCase(
        "Test_MutateAdmission_MemoryPercentageValidation/percentage of 100 is accepted",
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"},
        "whole 1",
    ),
    AdmissionCase(
        "Test_MutateAdmission_MemoryPercentageValidation/percentage of 101 is rejected",
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "101"},
        "refused: must be a whole number 0..100, got '101'",
    ),
    AdmissionCase(
        "Test_MutateAdmission_MemoryPercentageValidation/percentage above 100 is rejected",
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"},
        "refused: must be a whole number 0..100, got '150'",
    ),
    AdmissionCase(
        "TestZeroMemoryPercentageIsAccountedAsWholeCard/must book the whole card, not 0",
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"},
        "whole 1",
    ),
]


@pytest.mark.parametrize("case", ADMISSION_CASES, ids=[c.source for c in ADMISSION_CASES])
def test_admission_rows(case: AdmissionCase) -> None:
    if case.becomes.startswith("refused: "):
        with pytest.raises(hami.HamiError) as caught:
            hami.translate(_pod(**case.limits))
        assert case.becomes.removeprefix("refused: ") in str(caught.value)
        return
    done = hami.translate(_pod(**case.limits))
    assert done is not None
    pod = done[0]
    if case.becomes.startswith("whole "):
        count = case.becomes.removeprefix("whole ")
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": count}
        assert "gpu-fraction" not in pod["metadata"]["annotations"]
    else:
        assert pod["metadata"]["annotations"]["gpu-fraction"] == case.becomes


# ------------------------------------------------------------------ policies
@dataclass(frozen=True)
class PolicyCase:
    source: str
    annotations: dict[str, str]
    card: str | None  # the pod's own card policy; None = the cluster's (gpupack/gpuspread)


POLICY_CASES = [
    # pkg/util/util_test.go, TestGetGPUSchedulerPolicyByPod: a pod with no HAMi key
    # follows the configured default, which is the cluster's card placement in kai-py.
    PolicyCase("TestGetGPUSchedulerPolicyByPod/no annotation", {}, None),
    PolicyCase("TestGetGPUSchedulerPolicyByPod/other annotations", {"other-annotation": "v"}, None),
    PolicyCase(
        "TestGetGPUSchedulerPolicyByPod/with annotation",
        {"hami.io/gpu-scheduler-policy": "spread"},
        "spread",
    ),
]


@pytest.mark.parametrize("case", POLICY_CASES, ids=[c.source for c in POLICY_CASES])
def test_policy_rows(case: PolicyCase) -> None:
    policy = pins.policy_of(_pod(case.annotations))
    assert (policy.card if policy is not None else None) == case.card


def test_a_policy_kai_py_does_not_apply_is_refused_by_name() -> None:
    # HAMi v2.10 also knows topology-aware, mutex and numa for cards; kai-py applies only
    # binpack and spread, and says so rather than ignoring the value.
    pod = _pod({"hami.io/gpu-scheduler-policy": "topology-aware"})
    with pytest.raises(WorkloadError) as caught:
        pins.policy_of(pod)
    assert str(caught.value) == (
        "Pod ns/p: metadata.annotations[hami.io/gpu-scheduler-policy]: 'topology-aware' is not "
        "a policy kai-py applies: expected binpack or spread"
    )


# ------------------------------------------------------------------ fitting and choosing
@dataclass(frozen=True)
class Gpu:
    uuid: str
    mib: int
    healthy: bool = True
    product: str = "NVIDIA-Tesla T4"


@dataclass(frozen=True)
class Asks:
    """One pod, HAMi's way: N cards, a MiB or percentage share, cores, annotations."""

    name: str
    gpus: int = 1
    mem: int | None = None
    percent: int | None = None
    cores: int | None = None
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FitCase:
    source: str
    nodes: dict[str, list[Gpu]]
    before: list[Asks]  # placed first (HAMi's "Used..." of the row), in this order
    pod: Asks
    status: str  # Bound or Pending
    node: str | None = None
    # "own" = the pod got a card of its own, "joins <pod>" = it shares that pod's cards
    cards: str | None = None
    xfail: str = ""


FIT_CASES = [
    # pkg/device/nvidia/device_test.go, TestDevices_Fit
    FitCase(
        "TestDevices_Fit/fit success",
        {"node1": [Gpu("GPU-0", 128), Gpu("GPU-1", 128)]},
        [],
        Asks("p", mem=64, cores=50),
        "Bound",
        cards="own",
    ),
    FitCase(
        "TestDevices_Fit/fit fail: memory not enough",
        {"node1": [Gpu("GPU-0", 128)]},
        [],
        Asks("p", mem=512, cores=50),
        "Pending",
    ),
    FitCase(
        "TestDevices_Fit/fit fail: core not enough",
        {"node1": [Gpu("GPU-0", 1024)]},
        [Asks("first", mem=1, cores=100, annotations={USE_UUID: "GPU-0"})],
        Asks("p", mem=512, cores=50),
        "Pending",
        xfail="compute shares (nvidia.com/gpucores) are not enforced: kai-py drops them",
    ),
    FitCase(
        "TestDevices_Fit/fit fail: user assign use uuid mismatch",
        {"node1": [Gpu("GPU-1", 1280)]},
        [],
        Asks("p", gpus=2, mem=512, cores=50, annotations={USE_UUID: "GPU-0"}),
        "Pending",
    ),
    FitCase(
        "TestDevices_Fit/fit fail: user assign no use uuid match",
        {"node1": [Gpu("GPU-0", 1280)]},
        [],
        Asks("p", gpus=2, mem=512, cores=50, annotations={NOUSE_UUID: "GPU-0"}),
        "Pending",
    ),
    FitCase(
        "TestDevices_Fit/fit success: but core limit can't exceed 100",
        {"node1": [Gpu("GPU-0", 1280)]},
        [],
        Asks("p", mem=512, cores=120),
        "Bound",
    ),
    FitCase(
        "TestDevices_Fit/fit fail:  card exclusively",
        {"node1": [Gpu("GPU-0", 1280)]},
        [Asks("first", mem=1, annotations={USE_UUID: "GPU-0"})],
        Asks("p", mem=512, cores=100, annotations={USE_UUID: "GPU-0"}),
        "Pending",
        xfail="compute shares (nvidia.com/gpucores: 100 = the card alone) are not enforced",
    ),
    FitCase(
        "TestDevices_Fit/fit fail:  CardComputeUnitsExhausted",
        {"node1": [Gpu("GPU-0", 1280)]},
        [Asks("first", mem=1, cores=100, annotations={USE_UUID: "GPU-0"})],
        Asks("p", mem=512, cores=0, annotations={USE_UUID: "GPU-0"}),
        "Pending",
        xfail="compute shares (nvidia.com/gpucores) are not enforced: kai-py drops them",
    ),
    FitCase(
        "TestDevices_Fit/fit fail:  AllocatedCardsInsufficientRequest",
        {"node1": [Gpu("GPU-0", 1280)]},
        [],
        Asks("p", gpus=2, mem=512, cores=20),
        "Pending",
    ),
    FitCase(
        "TestDevices_Fit/fit fail: partial allocation AllocatedCardsInsufficientRequest for "
        "multiple cards",
        {"node1": [Gpu("GPU-0", 1280), Gpu("GPU-1", 1280)]},
        [],
        Asks("p", gpus=3, mem=512, cores=20),
        "Pending",
    ),
    FitCase(
        "TestDevices_Fit/fit success:  memory percentage",
        {"node1": [Gpu("GPU-0", 1280)]},
        [Asks("first", percent=20, annotations={USE_UUID: "GPU-0"})],
        Asks("p", percent=10, cores=20),
        "Bound",
        cards="joins first",
    ),
    FitCase(
        "TestDevices_Fit/fit fail:  CardNotHealth",
        {"node1": [Gpu("GPU-0", 1280, healthy=False)]},
        [],
        Asks("p", percent=10, cores=20),
        "Pending",
    ),
    FitCase(
        "TestZeroMemoryPercentageIsAccountedAsWholeCard/empty card should fit",
        {"node1": [Gpu("GPU-0", 11264)]},
        [],
        Asks("p", percent=0),
        "Bound",
    ),
    FitCase(
        "TestZeroMemoryPercentageIsAccountedAsWholeCard/an almost full card must not fit",
        {"node1": [Gpu("GPU-0", 11264)]},
        [Asks("first", mem=11260, annotations={USE_UUID: "GPU-0"})],
        Asks("p", percent=0),
        "Pending",
    ),
    # pkg/scheduler/score_test.go, Test_fitInCertainDevice
    FitCase(
        "Test_fitInCertainDevice/allocated device",
        {"node-1": [Gpu("GPU-0", 8192)]},
        [Asks("first", mem=2048, cores=1, annotations={USE_UUID: "GPU-0"})],
        Asks("p", mem=1024, cores=1),
        "Bound",
        cards="joins first",
    ),
    FitCase(
        "Test_fitInCertainDevice/core limit exceed 100",
        {"node-1": [Gpu("GPU-0", 8192)]},
        [Asks("first", mem=2048, cores=1, annotations={USE_UUID: "GPU-0"})],
        Asks("p", mem=1024, cores=200),
        "Pending",
        xfail="compute shares (nvidia.com/gpucores) are not enforced: kai-py drops them",
    ),
    FitCase(
        "Test_fitInCertainDevice/card insufficient remaining memory",
        {"node-1": [Gpu("GPU-0", 8000)]},
        [Asks("first", mem=8000, cores=1, annotations={USE_UUID: "GPU-0"})],
        Asks("p", percent=100, cores=100),
        "Pending",
    ),
    FitCase(
        "Test_fitInCertainDevice/the container wants exclusive access to an entire card, but the "
        "card is already in use",
        {"node-1": [Gpu("GPU-0", 8192)]},
        [Asks("first", mem=2048, cores=0, annotations={USE_UUID: "GPU-0"})],
        Asks("p", mem=100, cores=100),
        "Pending",
        xfail="compute shares (nvidia.com/gpucores: 100 = the card alone) are not enforced",
    ),
    FitCase(
        "Test_fitInCertainDevice/can't allocate core=0 job to an already full GPU",
        {"node-1": [Gpu("GPU-0", 8192)]},
        [Asks("first", mem=2048, cores=100, annotations={USE_UUID: "GPU-0"})],
        Asks("p", mem=1024, cores=0),
        "Pending",
        xfail="compute shares (nvidia.com/gpucores) are not enforced: kai-py drops them",
    ),
    FitCase(
        "Test_fitInCertainDevice/card uuid don't match",
        {"node-1": [Gpu("GPU-0", 8192)]},
        [Asks("first", mem=2048, cores=1, annotations={USE_UUID: "GPU-0"})],
        Asks("p", mem=1024, cores=1, annotations={USE_UUID: "GPU-abc"}),
        "Pending",
    ),
    # pkg/scheduler/score_test.go, Test_calcScore (HAMi's default policies: nodes
    # binpack, cards spread)
    FitCase(
        "Test_calcScore/one node one device one pod one container use one device.",
        {"node1": [Gpu("GPU-1", 8000)]},
        [],
        Asks("p", mem=1000, cores=30),
        "Bound",
        node="node1",
    ),
    FitCase(
        "Test_calcScore/one node one device one pod one container use one device,but this "
        "device before having use.",
        {"node1": [Gpu("GPU-1", 8000)]},
        [Asks("first", mem=4000, cores=50, annotations={USE_UUID: "GPU-1"})],
        Asks("p", mem=1000, cores=30),
        "Bound",
        cards="joins first",
    ),
    FitCase(
        "Test_calcScore/one node two device one pod one container use one device",
        {"node1": [Gpu("GPU-1", 8000), Gpu("GPU-2", 8000)]},
        [],
        Asks("p", mem=1000, cores=30),
        "Bound",
        cards="own",
    ),
    FitCase(
        "Test_calcScore/one node two device one pod one container use one device,but having "
        "use 50%",
        {"node1": [Gpu("GPU-1", 8000), Gpu("GPU-2", 8000)]},
        [Asks("first", mem=4000, cores=50, annotations={USE_UUID: "GPU-2"})],
        Asks("p", mem=1000, cores=30),
        "Bound",
        cards="own",  # spread: the empty card, not the half-used one
    ),
    FitCase(
        "Test_calcScore/one node two device one pod one container use two device",
        {"node1": [Gpu("GPU-1", 8000), Gpu("GPU-2", 8000)]},
        [],
        Asks("p", gpus=2, mem=1000, cores=30),
        "Bound",
        cards="own",
    ),
    FitCase(
        "Test_calcScore/one node two device one pod one container use two device,but this two "
        "device before having use.",
        {"node1": [Gpu("GPU-1", 8000), Gpu("GPU-2", 8000)]},
        [Asks("first", gpus=2, mem=4000, cores=50, annotations={USE_UUID: "GPU-1,GPU-2"})],
        Asks("p", gpus=2, mem=1000, cores=30),
        "Bound",
        cards="joins first",
    ),
    FitCase(
        "Test_calcScore/two node per node having one device one pod one container use one device",
        {"node1": [Gpu("GPU-1", 8000)], "node2": [Gpu("GPU-2", 8000)]},
        [],
        Asks("p", mem=1000, cores=30),
        "Bound",
        node="node1",  # equal scores: the first node
    ),
    FitCase(
        "Test_calcScore/two node per node having one device one pod one container use one "
        "device,one device having use 50%",
        {"node1": [Gpu("GPU-1", 8000)], "node2": [Gpu("GPU-2", 8000)]},
        [Asks("first", mem=4000, cores=50, annotations={USE_UUID: "GPU-1"})],
        Asks("p", mem=1000, cores=30),
        "Bound",
        node="node1",  # binpack: the fuller node scores higher
        cards="joins first",
    ),
    FitCase(
        "Test_calcScore/one node one device one pod one container use one device and not "
        "enough resource,node should be failed.",
        {"node1": [Gpu("GPU-1", 50)]},
        [],
        Asks("p", mem=1000, cores=30),
        "Pending",
    ),
]


def _manifest(pod: Asks, order: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(pod.gpus)} if pod.gpus else {}
    if pod.mem is not None:
        limits["nvidia.com/gpumem"] = str(pod.mem)
    if pod.percent is not None:
        limits["nvidia.com/gpumem-percentage"] = str(pod.percent)
    if pod.cores is not None:
        limits["nvidia.com/gpucores"] = str(pod.cores)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": "ml",
            "creationTimestamp": f"2026-01-01T00:00:{order:02d}Z",
            "labels": {"kai.scheduler/queue": "ml"},
            "annotations": dict(pod.annotations),
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
        },
    }


def _node(name: str, gpus: list[Gpu]) -> dict[str, Any]:
    cards = [
        Card(index=i, uuid=g.uuid, product=g.product, memory_mib=g.mib, healthy=g.healthy)
        for i, g in enumerate(gpus)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kai.scheduler/gpu-inventory": inventory.inventory_json(cards, "t")},
        },
        "status": {
            "allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": str(len(gpus))}
        },
    }


QUEUE = {
    "apiVersion": "scheduling.run.ai/v2",
    "kind": "Queue",
    "metadata": {"name": "ml"},
    "spec": {
        "resources": {
            "gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "cpu": {"quota": -1, "limit": -1},
            "memory": {"quota": -1, "limit": -1},
        }
    },
}


def run_pods(
    nodes: dict[str, list[Gpu]], pods: list[Asks], config: Config | None = None
) -> dict[str, Any]:
    """One allocate cycle over the nodes and pods (in creation order), as kai-py simulate."""
    bodies = [_node(n, g) for n, g in nodes.items()] + [QUEUE]
    bodies += [_manifest(p, i) for i, p in enumerate(pods)]
    docs = [Document(f"case#{i}", json.loads(json.dumps(b))) for i, b in enumerate(bodies)]
    return to_json(Simulation(docs, config=config).run(1))


def _fit_param(case: FitCase) -> Any:
    marks = [pytest.mark.xfail(reason=case.xfail, strict=True)] if case.xfail else []
    return pytest.param(case, id=case.source, marks=marks)


@pytest.mark.parametrize("case", [_fit_param(c) for c in FIT_CASES])
def test_fit_rows(case: FitCase) -> None:
    result = run_pods(case.nodes, [*case.before, case.pod])
    for earlier in case.before:
        assert result["pods"][f"ml/{earlier.name}"]["status"] == "Bound", earlier
    got = result["pods"][f"ml/{case.pod.name}"]
    assert got["status"] == case.status
    if case.node is not None:
        assert got["node"] == case.node
    if case.cards is not None:
        groups = set(got["gpus"]["groups"])
        taken = {g for p in case.before for g in result["pods"][f"ml/{p.name}"]["gpus"]["groups"]}
        if case.cards == "own":
            assert groups and not groups & taken, (groups, taken)
        else:
            other = result["pods"][f"ml/{case.cards.removeprefix('joins ')}"]["gpus"]["groups"]
            assert groups == set(other), (groups, other)


def test_every_deliberate_difference_is_listed() -> None:
    listed = KNOWN_DIFFERENCES.read_text(encoding="utf-8").split("## HAMi", 1)[1]
    for case in FIT_CASES:
        if case.xfail:
            assert f"`{case.source}`" in listed, case.source
