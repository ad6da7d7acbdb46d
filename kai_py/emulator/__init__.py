"""An emulated Kubernetes cluster: an in-memory API server plus simulated GPU nodes.

The API server (docs/emulator.md): ``storage/`` holds the state and semantics
(:class:`~kai_py.emulator.storage.store.Store`, usable in process); ``apiserver/``
serves it over HTTP for kubectl, the kubernetes client and Kopf
(:class:`~kai_py.emulator.apiserver.server.EmulatedAPIServer`;
:func:`~kai_py.emulator.apiserver.threaded.run_in_thread` runs it in a thread).
The simulated nodes live in ``nodes/``, made from the cluster description
(``cluster_spec``, with the annotations and quantities it shares with them); the
built-in controllers live in ``controllers/``, and what both talk to the cluster
through in ``clientgo/``. ``dev_cluster`` puts it all together; ``dev`` is
``kai-py dev``.

Submodules are imported explicitly (``from kai_py.emulator.apiserver.server import
EmulatedAPIServer``) so that importing one part does not load the others.
"""
