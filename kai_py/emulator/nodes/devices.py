"""The NVIDIA device plugin of one simulated node: cards, UUIDs, allocation.

In a real cluster the kubelet's device manager asks the plugin for N cards
per container and the plugin answers with the lowest free ones (its
GetPreferredAllocation has no topology to weigh on a flat node). The
scheduler never chooses a card; it only counts. kai-py's fractional GPU
sharing depends on that: the reservation pod learns its card from here.

The allocation table is the kubelet's checkpoint. A real kubelet keeps it
in a file; ours is rebuilt from the pods' recorded devices on restart
(``restore``), so a restart never hands one card to two pods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kai_py.emulator.cluster_spec import gpu_uuid


class DeviceAllocationError(RuntimeError):
    """Not enough free cards: the kubelet turns this into UnexpectedAdmissionError."""


@dataclass
class DevicePlugin:
    node_name: str
    count: int
    resource: str = "nvidia.com/gpu"
    # index -> (pod uid, container name)
    _owners: dict[int, tuple[str, str]] = field(default_factory=dict)

    @property
    def uuids(self) -> list[str]:
        return [gpu_uuid(self.node_name, index) for index in range(self.count)]

    def uuid(self, index: int) -> str:
        return gpu_uuid(self.node_name, index)

    def index_of(self, uuid: str) -> int | None:
        for index in range(self.count):
            if gpu_uuid(self.node_name, index) == uuid:
                return index
        return None

    def free_indices(self) -> list[int]:
        return [index for index in range(self.count) if index not in self._owners]

    def allocated_to(self, pod_uid: str, container: str | None = None) -> list[int]:
        return sorted(
            index
            for index, (uid, name) in self._owners.items()
            if uid == pod_uid and (container is None or name == container)
        )

    def allocate(self, pod_uid: str, container: str, count: int) -> list[str]:
        """Give ``count`` cards to one container; asking again returns the same cards."""
        held = self.allocated_to(pod_uid, container)
        if held:
            return [self.uuid(index) for index in held]
        free = self.free_indices()
        if count > len(free):
            raise DeviceAllocationError(
                f"Allocate failed due to requested number of devices unavailable for "
                f"{self.resource}. Requested: {count}, Available: {len(free)}, "
                "which is unexpected"
            )
        chosen = free[:count]
        for index in chosen:
            self._owners[index] = (pod_uid, container)
        return [self.uuid(index) for index in chosen]

    def restore(self, pod_uid: str, container: str, uuids: Sequence[str]) -> list[str]:
        """Take back cards recorded on a pod before a restart.

        Returns the UUIDs that could not be restored (unknown, or already
        held by another pod); the caller must not run the pod on those.
        """
        conflicts: list[str] = []
        for uuid in uuids:
            index = self.index_of(uuid)
            owner = self._owners.get(index) if index is not None else None
            if index is None or (owner is not None and owner != (pod_uid, container)):
                conflicts.append(uuid)
                continue
            self._owners[index] = (pod_uid, container)
        return conflicts

    def release(self, pod_uid: str) -> list[str]:
        """Free every card of a pod (it ended or was deleted)."""
        freed = self.allocated_to(pod_uid)
        for index in freed:
            del self._owners[index]
        return [self.uuid(index) for index in freed]

    def in_use(self) -> int:
        return len(self._owners)

    def allocations(self) -> dict[str, str]:
        """UUID -> the uid of the pod that holds it."""
        return {self.uuid(index): uid for index, (uid, _) in sorted(self._owners.items())}
