"""Protobuf request bodies: every fixture decodes to the JSON Go writes for the same object.

``fixtures/protobuf/<name>.pb`` is a typed Go object encoded by client-go's
protobuf serializer and ``<name>.json`` the same object from Go's JSON
encoder (both from ``scripts/k8sproto``: ``go run . fixtures DIR``).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from kai_py.emulator.apiserver import protobuf
from kai_py.emulator.apiserver.protobuf import ProtobufError
from kai_py.emulator.apiserver.threaded import run_in_thread

FIXTURES = Path(__file__).parent / "fixtures" / "protobuf"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.pb"))


@pytest.mark.parametrize("name", NAMES)
def test_fixture_decodes_to_the_go_json_form(name: str) -> None:
    got = protobuf.decode((FIXTURES / f"{name}.pb").read_bytes())
    want = json.loads((FIXTURES / f"{name}.json").read_text())
    assert got == want


def test_the_fixtures_cover_the_kinds_go_clients_create() -> None:
    assert {
        "pod",
        "namespace",
        "configmap",
        "pvc",
        "job",
        "cronjob",
        "deployment",
        "statefulset",
        "priorityclass",
        "runtimeclass",
        "storageclass",
        "persistentvolume",
    } <= set(NAMES)


def test_pointer_zero_values_stay_and_inlined_structs_flatten() -> None:
    deploy = protobuf.decode((FIXTURES / "deployment.pb").read_bytes())
    assert deploy["spec"]["replicas"] == 0  # *int32 set to 0: not the same as unset
    volumes = protobuf.decode((FIXTURES / "pod.pb").read_bytes())["spec"]["volumes"]
    assert volumes[0] == {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version.encode()) + _field(2, kind.encode())
    return protobuf.MAGIC + _field(1, type_meta) + _field(2, raw)


def test_a_kind_without_a_schema_is_refused_by_name() -> None:
    with pytest.raises(ProtobufError, match=r"scheduling\.run\.ai/v2 Queue is not supported"):
        protobuf.decode(_envelope("scheduling.run.ai/v2", "Queue", b""))


def test_a_field_of_the_wrong_wire_type_is_refused() -> None:
    # Pod field 1 (metadata) as a varint instead of a message.
    with pytest.raises(ProtobufError, match="malformed protobuf body"):
        protobuf.decode(_envelope("v1", "Pod", _varint(1 << 3 | 0) + _varint(7)))


def test_a_truncated_body_is_refused() -> None:
    body = (FIXTURES / "pod.pb").read_bytes()
    with pytest.raises(ProtobufError):
        protobuf.decode(body[: len(body) // 2])


@pytest.mark.parametrize(
    ("nanos", "text"),
    [(0, "0s"), (1_500_000, "1.5ms"), (90 * 10**9, "1m30s"), (3_723_500_000_000, "1h2m3.5s")],
)
def test_durations_are_written_as_go_does(nanos: int, text: str) -> None:
    assert protobuf._go_duration(nanos) == text


#: What client-go's typed clients send: protobuf if the server can, anything else otherwise.
CLIENT_GO_ACCEPT = "application/vnd.kubernetes.protobuf, */*"


def _get(url: str, accept: str) -> tuple[int, str, bytes]:
    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as resp:
        first = resp.readline() if "watch=" in url else resp.read()
        return resp.status, resp.headers.get("Content-Type", ""), first


def test_a_protobuf_body_creates_and_a_client_go_accept_header_reads_json() -> None:
    with run_in_thread() as srv:
        req = urllib.request.Request(
            srv.url + "/api/v1/namespaces/default/configmaps",
            data=(FIXTURES / "configmap.pb").read_bytes(),
            headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 201
        base = srv.url + "/api/v1/namespaces/default/configmaps"
        for url in (f"{base}/pb-cm", base, f"{base}?watch=1"):
            status, content_type, body = _get(url, CLIENT_GO_ACCEPT)
            assert (status, content_type.split(";")[0]) == (200, "application/json"), url
            assert "pb-cm" in repr(json.loads(body)), url
