"""A real kube-apiserver and etcd on loopback, for tests.

The binaries come from ``scripts/k8s-binaries.sh`` (built from the Go
modules ``k8s.io/kubernetes`` and ``go.etcd.io/etcd/server/v3``). Where they
are: ``$KAI_PY_K8S_BIN`` (``.ci/run`` sets it), else the script's cache dir.

The server runs with what an operator meets on a real cluster and the
emulator does not have: authentication (a static token for the admin,
TokenRequest tokens for ServiceAccounts), ``--authorization-mode=RBAC``,
the default admission plugins, TLS, and an audit log (every request with
its user, verb and resource), which tests read to learn what the operator
asked of the API.

Of kube-controller-manager only the garbage collector runs (ownerReference
cascades, foreground deletion), with the admin's credentials. There is no
scheduler and no kubelet; the tests run kai-py's simulated kubelets, device
plugins and Job/ReplicaSet/Deployment controllers against the server over
HTTP (:mod:`kai_py.emulator.clientgo.http_client`), and do what the
controller manager's disabled controllers would have: a ``default``
ServiceAccount and the ``kube-root-ca.crt`` ConfigMap in each namespace (every
pod mounts it through its service account token's projected volume, and waits
for it like for any ConfigMap it mounts), the not-ready taint off a Ready node.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S_VERSION = "v1.37.2"
ADMIN_TOKEN = "kai-py-admin-token"


def binaries_dir() -> Path | None:
    """Where kube-apiserver and etcd are, or None if they are not built here."""
    env = os.environ.get("KAI_PY_K8S_BIN")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    folder = cache / "kai-py" / "k8s" / K8S_VERSION / "bin"
    return folder if (folder / "kube-apiserver").exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"""


@dataclass
class RealApiServer:
    """etcd + kube-apiserver in ``workdir``; ``start()`` then ``stop()``."""

    workdir: Path
    bin_dir: Path
    port: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    startup_seconds: float = 0.0
    #: kube-controller-manager's --controllers ("" runs none).
    controllers: str = "garbage-collector-controller"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> str:
        # The apiserver's self-signed serving certificate, followed by its CA.
        return str(self.workdir / "certs" / "apiserver.crt")

    @property
    def kubeconfig_path(self) -> str:
        return str(self.workdir / "admin.kubeconfig")

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = (self.workdir / f"{name}.log").open("wb")
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir)
        out.close()
        self.processes.append(process)
        return process

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")[-5000:]

    def start(self) -> RealApiServer:
        """Start etcd, kube-apiserver and the controller manager; on failure stop what started."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> RealApiServer:
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if shutil.which("openssl") is None:
            raise RuntimeError("openssl is needed to make the service-account signing key")
        key = self.workdir / "sa.key"
        subprocess.run(
            ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
        )
        (self.workdir / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n')
        (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        client_port, peer_port = free_port(), free_port()
        self.port = free_port()
        etcd_url = f"http://127.0.0.1:{client_port}"
        etcd = self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.workdir / 'certs'}",
                "--authorization-mode=RBAC",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={key}",
                f"--service-account-signing-key-file={key}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                f"--audit-log-path={self.audit_log}",
                f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
                "--audit-log-mode=blocking",
                "--profiling=false",
                "--v=0",
            ],
        )
        deadline = time.monotonic() + 120
        while True:
            if etcd.poll() is not None:
                raise RuntimeError(f"etcd exited:\n{self.log('etcd')}")
            if self.processes[1].poll() is not None:
                raise RuntimeError(f"kube-apiserver exited:\n{self.log('kube-apiserver')}")
            if self._ready():
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"kube-apiserver not ready:\n{self.log('kube-apiserver')}")
            time.sleep(0.25)
        self.write_kubeconfig(self.kubeconfig_path, ADMIN_TOKEN, "admin")
        if self.controllers:
            self._spawn(
                "kube-controller-manager",
                [
                    str(self.bin_dir / "kube-controller-manager"),
                    f"--kubeconfig={self.kubeconfig_path}",
                    f"--controllers={self.controllers}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--v=0",
                ],
            )
        self.startup_seconds = time.monotonic() - t0
        return self

    def _ready(self) -> bool:
        if not Path(self.ca_file).exists():
            return False
        try:
            status, _ = self.request("GET", "/readyz")
        except (OSError, urllib.error.URLError):
            return False
        return status == 200

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        self.processes.clear()

    # ---- talking to it (admin unless a token is given) ------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str = ADMIN_TOKEN,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        context = ssl.create_default_context(cafile=self.ca_file)
        try:
            with urllib.request.urlopen(req, context=context, timeout=30) as resp:
                text = resp.read().decode()
                status = resp.status
        except urllib.error.HTTPError as exc:
            text = exc.read().decode()
            status = exc.code
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def must(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, result = self.request(method, path, body, **kw)
        if status >= 400:
            raise RuntimeError(f"{method} {path}: {status} {result}")
        return result

    def ensure(self, path: str, body: dict[str, Any]) -> None:
        """Create, or leave alone what is there already (409)."""
        status, result = self.request("POST", path, body)
        if status >= 400 and status != 409:
            raise RuntimeError(f"POST {path}: {status} {result}")

    def write_kubeconfig(self, path: str, token: str, user: str) -> str:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "real",
                    "cluster": {"server": self.url, "certificate-authority": self.ca_file},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "real", "context": {"cluster": "real", "user": user}}],
            "current-context": "real",
        }
        Path(path).write_text(yaml.safe_dump(config))
        return path

    def namespace(self, name: str) -> None:
        """A namespace with its ``default`` ServiceAccount and ``kube-root-ca.crt``
        ConfigMap (the controller manager's jobs)."""
        self.ensure(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        self.service_account(name, "default")
        self.ensure(
            f"/api/v1/namespaces/{name}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kube-root-ca.crt"},
                "data": {"ca.crt": Path(self.ca_file).read_text()},
            },
        )

    def service_account(self, namespace: str, name: str) -> None:
        self.ensure(
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        )

    def token_for(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A ServiceAccount token from the TokenRequest API (signed with the SA key)."""
        self.service_account(namespace, name)
        result = self.must(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        return str(result["status"]["token"])

    def apply_crds(self, docs: list[dict[str, Any]]) -> None:
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for doc in docs:
            self.ensure(path, doc)
        for doc in docs:
            name = doc["metadata"]["name"]
            deadline = time.monotonic() + 30
            while True:
                crd = self.must("GET", f"{path}/{name}")
                conditions = (crd.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} not established: {conditions}")
                time.sleep(0.1)
            # Established is not yet served: a list answers 429 "storage is
            # (re)initializing" for a moment; wait until it answers 200.
            spec = doc["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("served", True))
            listing = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
            while self.request("GET", listing)[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} not served")
                time.sleep(0.1)

    def apply_yaml(self, text: str) -> None:
        """Create the RBAC objects, namespaces, accounts and admission policies of a YAML stream."""
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            group_version = doc["apiVersion"]
            prefix = f"/apis/{group_version}" if "/" in group_version else "/api/v1"
            plural = _PLURALS[doc["kind"]]
            ns = doc["metadata"].get("namespace")
            path = f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"
            status, result = self.request("POST", path, doc)
            if status == 409:
                self.must("PUT", f"{path}/{doc['metadata']['name']}", doc)
            elif status >= 400:
                raise RuntimeError(f"POST {path}: {status} {result}")

    def audit_events(self) -> list[dict[str, Any]]:
        events = []
        with contextlib.suppress(FileNotFoundError):
            for line in self.audit_log.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line))
        return events


_PLURALS = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}
