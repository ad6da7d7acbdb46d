"""The emulator against a real kube-apiserver: the same requests, side by side.

- CRD validation: bad Queues and PodGroups get the same 422 message from both
  servers (kai-py's CRDs, the emulator's structural-schema validation);
  known differences are listed with both texts, so a change on either side
  shows.
- Probes (``probes.py``) of behaviour an operator depends on: the table in
  docs/emulator.md lists every probe where the two differ, with each
  server's outcome; this test runs them all and checks the table, and that
  every probe not in the table has the same outcome on both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from probes import NS, PROBES, Target, setup
from realapi_backends import require_binaries
from realapi_server import ADMIN_TOKEN, RealApiServer

from kai_py.emulator.apiserver.threaded import run_in_thread
from kai_py.emulator.dev_cluster import kai_crds

DOC = Path(__file__).resolve().parents[2] / "docs" / "emulator.md"


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    server = RealApiServer(tmp_path_factory.mktemp("real"), require_binaries()).start()
    try:
        server.apply_crds(kai_crds())
        with run_in_thread() as emu:
            for crd in kai_crds():
                emu.call(emu.store.create("customresourcedefinitions", crd))
            found = {
                "real": Target(server.url, ADMIN_TOKEN, server.ca_file),
                "emulator": Target(emu.url),
            }
            for target in found.values():
                setup(target)
            yield found
    finally:
        server.stop()


# ---------------------------------------------------------------- CRD validation
def _queue(**gpu: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "bad"},
        "spec": {"resources": {"gpu": gpu}},
    }


def _podgroup(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "bad"},
        "spec": {"queue": "q", **spec},
    }


def _topology(levels: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "bad"},
        "spec": {"levels": levels},
    }


QUEUES = "/apis/scheduling.run.ai/v2/queues"
TOPOLOGIES = "/apis/kai.scheduler/v1alpha1/topologies"
PODGROUPS = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{NS}/podgroups"

BAD = {
    "queue quota below -1": (QUEUES, _queue(quota=-5)),
    "queue limit -0.5 (between -1 and 0)": (QUEUES, _queue(limit=-0.5)),
    "queue overQuotaWeight below 0": (QUEUES, _queue(overQuotaWeight=-1)),
    "queue quota not a number": (QUEUES, _queue(quota="lots")),
    "podgroup minMember below 0": (PODGROUPS, _podgroup(minMember=-1)),
    "podgroup minMember not an integer": (PODGROUPS, _podgroup(minMember="two")),
    "podgroup preemptibility not in the enum": (PODGROUPS, _podgroup(preemptibility="sometimes")),
    "topology without levels": (TOPOLOGIES, _topology([])),
    "topology nodeLabel not a label key": (TOPOLOGIES, _topology([{"nodeLabel": "a rack!"}])),
}

# Where the messages differ: the real server's text, then the emulator's.
KNOWN: dict[str, tuple[str, str]] = {}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_kai_objects_get_the_same_422_from_both_servers(
    targets: dict[str, Target], case: str
) -> None:
    path, body = BAD[case]
    answers = {name: t.call("POST", path, body) for name, t in targets.items()}
    for name, (status, result) in answers.items():
        assert status == 422, (name, status, result)
        assert result["reason"] == "Invalid", (name, result)
    real, emulated = (answers[n][1]["message"] for n in ("real", "emulator"))
    if case in KNOWN:
        assert (real, emulated) == KNOWN[case]
    else:
        assert emulated == real
    # kubectl prints "The <details.kind> <name> is invalid": the details must match too.
    real_details, emulated_details = (answers[n][1]["details"] for n in ("real", "emulator"))
    assert emulated_details == real_details


# ---------------------------------------------------------------- the table
def documented_differences() -> dict[str, tuple[str, str]]:
    """probe -> (real outcome, emulator outcome), from the table in docs/emulator.md."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- probes:begin -->", 1)[1].split("<!-- probes:end -->", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("probe", "") or set(cells[0]) <= {"-", " "}:
            continue
        rows[cells[0]] = (_outcome(cells[1]), _outcome(cells[2]))
    return rows


def _outcome(cell: str) -> str:
    """The outcome in a cell: its first backquoted word (the rest is prose)."""
    match = re.search(r"`([^`]+)`", cell)
    assert match, f"no `outcome` in table cell {cell!r}"
    return match.group(1)


def test_the_documented_differences_are_what_the_servers_do(
    targets: dict[str, Target],
) -> None:
    documented = documented_differences()
    assert set(documented) <= set(PROBES), set(documented) - set(PROBES)
    observed = {
        name: (probe(targets["real"]), probe(targets["emulator"])) for name, probe in PROBES.items()
    }
    wrong = {
        name: {"documented": documented.get(name, "the same on both"), "observed": got}
        for name, got in observed.items()
        if (documented[name] != got if name in documented else got[0] != got[1])
    }
    assert not wrong, wrong
