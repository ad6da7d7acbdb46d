"""The GPU inventory: which cards a node has, which a pod asks for, and how that is
written on the objects.

``inventory`` reads a node's cards (kai-py's ``kai.scheduler/gpu-inventory``
annotation, or HAMi's registration); ``nodeagent`` is ``kai-py node-agent``, which
publishes that annotation from NVML; ``pins`` reads a pod's pin to named cards
(HAMi's annotations); ``hami`` translates HAMi's GPU resources into KAI's sharing;
``groups`` is the GPU-group label and annotation the binder writes and the cache
reads back. Shared by the watch cache, the binder and the webhooks; it imports only
``kai_py.api``, the scheduler's model and (the node agent) the API client.
"""
