"""Kopf wiring of every role (thin): the scheduling loop, the binder, the pod-grouper,
the webhooks, leadership, settings, watches and logs. Each handler calls into the
parts below (``state``, ``writes``, ``binder``, ``podgrouper``, ...) and holds no
scheduling rule itself.
"""
