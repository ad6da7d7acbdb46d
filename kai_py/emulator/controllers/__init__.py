"""Built-in controllers of the emulated cluster: Job, Deployment, ReplicaSet, default scheduler."""
