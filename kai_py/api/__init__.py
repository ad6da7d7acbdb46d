"""kai-py's API: the CRD models and everything that names things on the wire.

- ``keys``: well-known labels, annotations and defaults shared with KAI;
- ``queue``, ``podgroup``, ``bindrequest``: pydantic models of the CRDs;
- ``common``: base classes, metadata, ManifestError; ``durations`` and
  ``quantities``: Kubernetes duration strings and resource quantities;
- ``crdgen``: the CRDs generated from the models (``kai-py crds``).

Nothing is re-exported here, so that importing ``kai_py.api.keys`` stays
cheap (no pydantic) for the emulator and the CLI.
"""
