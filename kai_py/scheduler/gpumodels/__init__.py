"""Quota per GPU model (kai-py's Queue ``spec.gpuModels``, docs/quota-per-model.md):
which model a node's GPUs are, what each queue holds of each model, and the node check
that keeps a queue within its limit (and non-preemptible work within its quota) of a
model. Installed only in sessions where some queue has ``gpuModels``."""
