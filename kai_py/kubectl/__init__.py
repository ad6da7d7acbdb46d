"""``kubectl kai``: kai-py's kubectl plugin (``kubectl-kai``), reading the live cluster.

``why`` (a pod's reason with its figures, its gang, its queue and its place in
line), ``queues`` (the queue tree with quota, limit, fair share, allocated and
pending) and ``cards`` (each GPU card's holders, reservation pods and pins).
``main`` does the reads through the API client; ``views`` and ``cards`` turn the
listed objects into the figures and tables, without API calls.
"""
