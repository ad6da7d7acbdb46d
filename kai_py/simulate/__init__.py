"""``kai-py simulate``: the offline loader and runner.

``inputs`` reads manifests from YAML files and folders (errors name the file);
``simulation`` runs scheduling cycles over them through the same build the
operator uses, and writes the outcome back between cycles as a cluster would. No
API client, no writes, no Kopf: it runs without a cluster.
"""
