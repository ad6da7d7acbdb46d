"""KAI's configuration objects (``kai.scheduler/v1``, cluster-scoped): ``Config``, the
cluster-wide settings (one object, ``kai-config``), and ``SchedulingShard``, the
settings of one scheduler and the node pool it serves.

The fields and their names are KAI's, so KAI's manifests apply unchanged. The parts
of the Config that configure KAI's own Deployments (images, replicas, services of
each component) are kept as written (``x-kubernetes-preserve-unknown-fields``):
kai-py reads the few settings it applies from them and names every other one it was
given in a ``NotApplied`` condition (docs/configuration.md lists each field).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, WithJsonSchema

from kai_py.api import keys
from kai_py.api.common import (
    INT_OR_STRING_QUANTITY,
    Duration,
    KubeModel,
    KubeObject,
    Quantity,
)

PlacementName = Literal["binpack", "spread"]

# A sub-object kept whole: KAI's schema there is large (pod templates, affinities,
# services) and kai-py only reads a few keys of it.
FreeForm = dict[str, Any]


class PluginConfig(KubeModel):
    """An override of one scheduler plugin (KAI's names: predicates, proportion, ...)."""

    enabled: bool | None = None
    priority: int | None = Field(default=None, description="Higher runs first.")
    arguments: dict[str, str] | None = None


class ActionConfig(KubeModel):
    """An override of one scheduler action (allocate, consolidation, reclaim, ...)."""

    enabled: bool | None = None
    priority: int | None = Field(default=None, description="Higher runs first.")


class MinRuntime(KubeModel):
    preempt_min_runtime: Duration | None = Field(
        default=None, description='Default for queues that set none ("5m").'
    )
    reclaim_min_runtime: Duration | None = Field(
        default=None, description='Default for queues that set none ("5m").'
    )


class PlacementStrategy(KubeModel):
    gpu: PlacementName | None = Field(default=None, description="binpack (default) or spread")
    cpu: PlacementName | None = Field(default=None, description="binpack (default) or spread")


class SchedulingShardSpec(KubeModel):
    args: dict[str, str] | None = Field(
        default=None, description="Scheduler flags by name, without the dashes."
    )
    go_mem_limit_ratio: float | None = Field(default=None, gt=0, le=1)
    go_mem_limit: Annotated[Quantity | None, WithJsonSchema(INT_OR_STRING_QUANTITY)] = None
    placement_strategy: PlacementStrategy | None = None
    partition_label_value: str | None = Field(
        default=None, description="The node-pool label value of the nodes this shard serves."
    )
    queue_depth_per_action: dict[str, int] | None = None
    min_runtime: MinRuntime | None = None
    k_value: float | None = Field(default=None, description="The proportion plugin's kValue.")
    usage_db_config: FreeForm | None = Field(default=None, alias="usageDBConfig")
    scenario_search_budgets: FreeForm | None = None
    plugins: dict[str, PluginConfig] | None = None
    actions: dict[str, ActionConfig] | None = None


class StatusCondition(KubeModel):
    """A metav1.Condition: KAI's clients compare observedGeneration with the object's."""

    type: str
    status: str
    observed_generation: int | None = None
    last_transition_time: datetime | None = None
    reason: str | None = None
    message: str | None = None


class ConfigStatus(KubeModel):
    conditions: list[StatusCondition] = Field(default_factory=list)


class SchedulingShard(KubeObject):
    KIND = "SchedulingShard"
    API_VERSION = f"{keys.KAI_CONFIG_GROUP}/{keys.KAI_CONFIG_VERSION}"
    NAMESPACED = False

    spec: SchedulingShardSpec = Field(default_factory=SchedulingShardSpec)
    status: ConfigStatus | None = None


class GlobalConfig(KubeModel):
    """``spec.global``: the keys kai-py reads are typed, every other key is kept."""

    model_config = ConfigDict(
        extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )

    node_pool_label_key: str | None = Field(
        default=None, description="The node-pool label (default kai.scheduler/node-pool)."
    )
    scheduler_name: str | None = None
    queue_label_key: str | None = None


class ConfigSpec(KubeModel):
    namespace: str | None = None
    global_: GlobalConfig | None = Field(default=None, alias="global")
    pod_grouper: FreeForm | None = None
    binder: FreeForm | None = None
    admission: FreeForm | None = None
    scheduler: FreeForm | None = None
    queue_controller: FreeForm | None = None
    pod_group_controller: FreeForm | None = None
    node_scale_adjuster: FreeForm | None = None
    prometheus: FreeForm | None = None
    numa_placement_exporter: FreeForm | None = None


class KaiConfig(KubeObject):
    """KAI's ``Config`` kind (named so here to keep it apart from the scheduler's Config)."""

    KIND = "Config"
    API_VERSION = f"{keys.KAI_CONFIG_GROUP}/{keys.KAI_CONFIG_VERSION}"
    NAMESPACED = False

    spec: ConfigSpec = Field(default_factory=ConfigSpec)
    status: ConfigStatus | None = None
