"""The operator's state: the watch cache and the Snapshot a scheduling cycle reads.

``cache`` keeps the objects a cycle needs, fed incrementally by watch events, and
hands out a consistent view; ``builder`` turns a view (or ``kai-py simulate``'s
manifests, as ``documents``) into the scheduler's ``Snapshot``, with ``convert``
for pods and nodes, ``foreign`` for other schedulers' pods, ``workloads`` for owners
given without their pods and ``queuetree`` for loops in the queue tree;
``passmemo`` keeps parsed objects from one pass to the next, ``idle`` says when a
cycle can be skipped and ``gcpause`` keeps the garbage collector out of a cycle.
It reads the GPU inventory and the pod-grouper's rules; it makes no API calls.
"""
