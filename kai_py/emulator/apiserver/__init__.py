"""The emulated API server's HTTP face: the Kubernetes REST and watch protocol
(``server``), discovery, server-side tables, protobuf input, admission webhooks,
RBAC, fault injection, the kubeconfig it writes, and running it in a thread. The
state and semantics behind it are in ``kai_py.emulator.storage``.
"""
