"""The client-go pattern, small: what the simulated nodes and controllers talk to the
cluster through. ``client`` is the narrow protocol, ``store_client`` and
``http_client`` implement it in process and over HTTP, ``runtime`` has informers
and work queues, ``events`` posts Events as kubelets and controllers do.
"""
