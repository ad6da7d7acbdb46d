"""Tenancy: what an admin gave each queue (kai-py's own Queue fields, none in KAI): the
namespaces that may use it, the priority classes its jobs may name (``access``) and
the GPU cards it owns (``cards``). One set of pure rules for the webhook, the
pod-grouper and the scheduler, so that all three refuse the same things."""
