"""Before the operator starts: can it reach a cluster at all?

Kopf would retry a missing or broken kubeconfig forever, with a traceback
each time; ``kai-py run`` checks first and stops with one line that says
what is wrong and what to do.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Final

from kai_py.apiclient.kube import Kube, KubeError, load_api_client

HINT: Final = "set KUBECONFIG, pass --kubeconfig PATH, or run kai-py in a pod"


def use_kubeconfig(path: str) -> None:
    """Make ``path`` the kubeconfig of everything in this process (Kopf logs in with it too)."""
    os.environ["KUBECONFIG"] = path
    from kubernetes.config import kube_config

    # The client reads $KUBECONFIG once, at import: set the default it kept too.
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = path


def check_access(kubeconfig: str | None = None, timeout: float = 5.0) -> str | None:
    """None when the API server answers; else one line saying why not."""
    path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
    if path and not os.environ.get("KUBERNETES_SERVICE_HOST") and not os.path.isfile(path):
        return f"no usable kubeconfig: {path} does not exist; {HINT}"
    try:
        api = load_api_client(kubeconfig)
    except Exception as exc:  # the client raises ConfigException, OSError, TypeError ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"no usable kubeconfig: {reason}; {HINT}"
    host = api.configuration.host
    # urllib3 logs each of its retries; the one line below says it all.
    pool_log = logging.getLogger("urllib3.connectionpool")
    level = pool_log.level
    pool_log.setLevel(logging.ERROR)
    try:
        Kube(api, timeout=timeout).get("/version")
    except KubeError as exc:
        if exc.code == 0:
            return f"cannot reach the API server at {host}: {_cause(exc.message)}"
        if exc.code == 401:
            return f"the API server at {host} does not accept these credentials (401)"
        # Any other answer (403 ...) means it is there; RBAC problems show per request.
    finally:
        pool_log.setLevel(level)
        api.close()  # type: ignore[no-untyped-call]
    return None


def _cause(message: str) -> str:
    """The useful tail of urllib3's nested error text ("[Errno 111] Connection refused")."""
    found = re.search(r"\[Errno -?\d+\][^\]\)\"']*", message)
    return found.group(0).strip() if found else message.splitlines()[0][:200]
