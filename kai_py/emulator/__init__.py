"""An emulated Kubernetes cluster: an in-memory API server plus simulated GPU nodes.

The API server (docs/emulator.md): :class:`~kai_py.emulator.store.Store` is the
state and semantics, usable in process; :class:`~kai_py.emulator.server.EmulatedAPIServer`
serves it over HTTP for kubectl, the kubernetes client and Kopf;
:func:`~kai_py.emulator.threaded.run_in_thread` runs that server in a thread.
The simulated nodes and controllers live in ``nodes/`` and ``controllers/``.

Submodules are imported explicitly (``from kai_py.emulator.server import
EmulatedAPIServer``) so that importing one part does not load the others.
"""
