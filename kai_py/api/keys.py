"""Well-known names: API groups, labels, annotations and defaults shared with KAI.

Every other module takes these names from here so that a KAI manifest means
the same thing everywhere in kai-py.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "scheduling.run.ai"
QUEUE_VERSION: Final = "v2"
PODGROUP_VERSION: Final = "v2alpha2"
BINDREQUEST_VERSION: Final = "v1alpha2"
# KAI keeps its Topology in a group of its own.
TOPOLOGY_GROUP: Final = "kai.scheduler"
TOPOLOGY_VERSION: Final = "v1alpha1"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
# A workload's topology constraint, copied by the pod-grouper into its PodGroup's
# spec.topologyConstraint (topology, requiredTopologyLevel, preferredTopologyLevel).
TOPOLOGY_ANNOTATION: Final = "kai.scheduler/topology"
TOPOLOGY_REQUIRED_ANNOTATION: Final = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED_ANNOTATION: Final = "kai.scheduler/topology-preferred-placement"
# A replica group cut into segments (LeaderWorkerSet, PyTorchJob): pods per segment,
# and each segment's placement levels (the topology's name as above).
SEGMENT_SIZE_ANNOTATION: Final = "kai.scheduler/segment-size"
SEGMENT_REQUIRED_ANNOTATION: Final = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED_ANNOTATION: Final = "kai.scheduler/segment-topology-preferred-placement"
# KAI's configuration objects (Config, SchedulingShard): their own group, as in KAI.
KAI_CONFIG_GROUP: Final = "kai.scheduler"
KAI_CONFIG_VERSION: Final = "v1"
#: The one Config KAI's operator reads (a singleton by name).
KAI_CONFIG_NAME: Final = "kai-config"
#: Where KAI installs its parts (and the Config says so); kai-py's chart: the release's.
DEFAULT_KAI_NAMESPACE: Final = "kai-scheduler"

DEFAULT_SCHEDULER_NAME: Final = "kai-scheduler"

# Labels
QUEUE_LABEL: Final = "kai.scheduler/queue"
PREEMPTIBILITY_LABEL: Final = "kai.scheduler/preemptibility"
NODE_POOL_LABEL: Final = "kai.scheduler/node-pool"
GPU_GROUP_LABEL: Final = "runai-gpu-group"
PRIORITY_CLASS_LABEL: Final = "priorityClassName"
GPU_COUNT_NODE_LABEL: Final = "nvidia.com/gpu.count"
GPU_MEMORY_NODE_LABEL: Final = "nvidia.com/gpu.memory"
GPU_PRODUCT_NODE_LABEL: Final = "nvidia.com/gpu.product"
# KAI's node roles for restrict node scheduling (its default label keys).
GPU_WORKER_NODE_LABEL: Final = "node-role.kubernetes.io/gpu-worker"
CPU_WORKER_NODE_LABEL: Final = "node-role.kubernetes.io/cpu-worker"

# Annotations
GPU_FRACTION_ANNOTATION: Final = "gpu-fraction"
GPU_MEMORY_ANNOTATION: Final = "gpu-memory"
#: KAI's annotation naming the container of a shared pod that uses the card (else the first).
GPU_FRACTION_CONTAINER_ANNOTATION: Final = "gpu-fraction-container-name"
GPU_FRACTION_NUM_DEVICES_ANNOTATION: Final = "gpu-fraction-num-devices"
POD_GROUP_ANNOTATION: Final = "pod-group-name"
RECEIVED_RESOURCE_TYPE_ANNOTATION: Final = "received-resource-type"
BATCH_MIN_MEMBER_ANNOTATION: Final = "kai.scheduler/batch-min-member"
RESERVED_GPU_INDEX_ANNOTATION: Final = "run.ai/reserve_for_gpu_index"
#: kai-py: on a pod or a Queue, "true" or "false": the pod's shared cards start one pod
#: at a time (the binder waits for the pod before it on the card to be Ready).
STAGGERED_START_ANNOTATION: Final = "kai.scheduler/staggered-start"
#: KAI's: on a shared pod, the prefix of its two GPU ConfigMaps (set by the pod webhook).
SHARED_GPU_CONFIGMAP_ANNOTATION: Final = "runai/shared-gpu-configmap"

# GPU pinning (HAMi's pod annotations, unchanged) and the node inventory.
USE_GPU_UUID_ANNOTATION: Final = "nvidia.com/use-gpuuuid"
NOUSE_GPU_UUID_ANNOTATION: Final = "nvidia.com/nouse-gpuuuid"
USE_GPU_TYPE_ANNOTATION: Final = "nvidia.com/use-gputype"
NOUSE_GPU_TYPE_ANNOTATION: Final = "nvidia.com/nouse-gputype"
#: Card indexes (comma list), the same on every node; HAMi v2.10 has no such key.
USE_GPU_INDEX_ANNOTATION: Final = "nvidia.com/use-gpuindexes"
#: HAMi's per-pod placement policies (binpack or spread), of nodes and of cards.
HAMI_NODE_POLICY_ANNOTATION: Final = "hami.io/node-scheduler-policy"
HAMI_GPU_POLICY_ANNOTATION: Final = "hami.io/gpu-scheduler-policy"
#: HAMi v2.10 keys kai-py reads only to say they are not applied (docs/pinning.md):
#: a pod's NUMA binding, its card mode filter and its card scoring weights, and a
#: Node's list of cordoned card UUIDs.
HAMI_NUMA_BIND_ANNOTATION: Final = "nvidia.com/numa-bind"
HAMI_VGPU_MODE_ANNOTATION: Final = "nvidia.com/vgpu-mode"
HAMI_SCORING_WEIGHTS_ANNOTATION: Final = "hami.io/device-scoring-weights"
HAMI_DEVICE_CORDON_ANNOTATION: Final = "hami.io/device-cordon"
#: kai-py's node inventory: the node's cards as JSON (docs/pinning.md), by ``kai-py node-agent``.
GPU_INVENTORY_ANNOTATION: Final = "kai.scheduler/gpu-inventory"
#: HAMi's node registration, read where present (clusters moving from HAMi).
HAMI_NODE_REGISTER_ANNOTATION: Final = "hami.io/node-nvidia-register"
#: On a Node as the scheduler reads it: GPU group -> card UUID (JSON), from reservation pods.
GPU_GROUP_CARDS_ANNOTATION: Final = "kai.scheduler/gpu-group-cards"
#: The cards a pinned pod was given (written by the binder after it verified them).
GPU_UUIDS_ANNOTATION: Final = "kai.scheduler/gpu-uuids"
#: HAMi's resources: N cards with a memory share of each.
HAMI_GPUMEM_RESOURCE: Final = "nvidia.com/gpumem"
HAMI_GPUMEM_PERCENTAGE_RESOURCE: Final = "nvidia.com/gpumem-percentage"

# Preemptibility values
PREEMPTIBLE: Final = "preemptible"
NON_PREEMPTIBLE: Final = "non-preemptible"

# Resources
GPU_RESOURCE: Final = "nvidia.com/gpu"

# Defaults
DEFAULT_QUEUE: Final = "default-queue"
DEFAULT_PARENT_QUEUE: Final = "default-parent-queue"
DEFAULT_PRIORITY_CLASS: Final = "train"
RESERVATION_NAMESPACE: Final = "kai-resource-reservation"
DEFAULT_STALENESS_GRACE_SECONDS: Final = 60.0
DEFAULT_QUEUE_PRIORITY: Final = 100
# A job whose priority is below this is preemptible unless it says otherwise.
PREEMPTIBLE_PRIORITY_THRESHOLD: Final = 100

# The priority classes KAI ships; known to kai-py without being applied.
STANDARD_PRIORITY_CLASSES: Final[dict[str, int]] = {
    "train": 50,
    "build-preemptible": 75,
    "build": 100,
    "inference": 125,
}

# Resource names in KAI's queue and pod-group status maps (GPU_RESOURCE is the third).
CPU_RESOURCE: Final = "cpu"
MEMORY_RESOURCE: Final = "memory"

# The priority class the pod-grouper gives to pods of a Deployment (serving workloads).
INFERENCE_PRIORITY_CLASS: Final = "inference"

# Event reason of every problem the pod-grouper reports.
POD_GROUPER_WARNING_REASON: Final = "PodGrouperWarning"

# Group of the Kubeflow training operator's job kinds.
KUBEFLOW_GROUP: Final = "kubeflow.org"

# The CRD category, so that `kubectl get kai` lists queues, pod groups and bind requests.
CRD_CATEGORY: Final = "kai"

# kai-py: when a PodGroup fell below minMember (RFC 3339), so that stale-gang
# eviction survives a scheduler restart and can be scripted in `kai-py simulate`.
STALE_SINCE_ANNOTATION: Final = "kai.scheduler/stale-since"
# KAI's own name for the same fact; read as well, so KAI-written groups carry over.
KAI_STALE_TIMESTAMP_ANNOTATION: Final = "kai.scheduler/stale-podgroup-timestamp"
# kai-py: every GPU group of a shared pod on several cards, comma-separated (the
# runai-gpu-group label holds the first; a label value cannot hold commas).
GPU_GROUPS_ANNOTATION: Final = "kai.scheduler/gpu-groups"
# kai-py: on the pods that hold cards while a pinned pod binds (the binder makes them,
# the scheduler's cache counts what they hold).
GPU_BLOCKER_LABEL: Final = "kai.scheduler/gpu-blocker"

# When one of the group's pods was last evicted (KAI's annotation): the preemption
# delay counts from it.
LAST_EVICTION_ANNOTATION: Final = "kai.scheduler/last-eviction-timestamp"
PREEMPTION_DELAY_ANNOTATION: Final = "kai.scheduler/preemption-delay"
STALENESS_GRACE_ANNOTATION: Final = "kai.scheduler/staleness-grace-period"
SKIP_PODGROUPER_ANNOTATION: Final = "kai.scheduler/skip-podgrouper"
TASK_PRIORITY_LABEL: Final = "kai.scheduler/task-priority"
# Queue-admission gating (KAI's proposed names): the scheduling gate the pod webhook adds
# to pods of gated queues, and when kai-py lifted it (the pod's quota reservation counts
# from then; docs/autoscaling.md).
QUEUE_ADMISSION_GATE: Final = "kai.scheduler/queue-admission"
QUEUE_ADMITTED_ANNOTATION: Final = "kai.scheduler/queue-admitted-timestamp"

#: kube-scheduler's annotation on an unbound PersistentVolumeClaim of a class that
#: waits for the first consumer: the node its volume is to be made for (read by the
#: external provisioner). kai-py's binder writes it before the Binding.
SELECTED_NODE_ANNOTATION: Final = "volume.kubernetes.io/selected-node"
#: The pod label naming the leaf sub-group (PodGroup spec.subGroups[].name) it belongs to.
SUBGROUP_LABEL: Final = "kai.scheduler/subgroup-name"
#: The sub-group of a pod without SUBGROUP_LABEL, as KAI names it.
DEFAULT_SUBGROUP: Final = "default"
