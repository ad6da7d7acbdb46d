"""The API client: how kai-py talks to the Kubernetes API server.

``kube`` is a thin JSON client (paths, errors, paged LISTs, retries of transient
failures) over the ``kubernetes`` package; ``httppool`` and ``informer`` are the
async HTTP stack of the hot paths (keep-alive requests and watch streams on the
event loop, an informer that LISTs and WATCHes); ``leader`` is Lease-based leader
election; ``eventpost`` posts core/v1 Events for the binder and the pod-grouper.
Nothing here knows what kai-py decides: it may import only ``kai_py.api`` and
``kai_py.metrics`` (API error counters).
"""
