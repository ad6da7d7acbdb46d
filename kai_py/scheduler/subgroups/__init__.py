"""Hierarchical PodGroups: the gang rules of a job whose PodGroup has spec.subGroups,
each sub-group a gang within the gang (which pods to place next, readiness, staleness,
what a victim search takes), as KAI v0.18 applies them."""
