"""A patch or update that loses a race to another write while its webhooks run.

kube-apiserver applies a patch inside GuaranteedUpdate: when the object
changed between the read and the write, it applies the patch again to the
newer object (admission included), so an unconditional patch never gets 409
for a race it did not ask about; a patch naming a resourceVersion does. An
update (PUT) without a resourceVersion is unconditional too, and retried alike.
The race is made on purpose: a mutating hook that, on its first call, waits
while another write lands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from apiserver_helpers import run

from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.storage.store import AdmissionRequest, Store

JSON = dict[str, Any]


class SlowFirstWebhook:
    """Mutates nothing; its first UPDATE call waits until ``release`` is set."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.updates = 0

    def active(self) -> bool:
        return True

    async def mutate(self, request: AdmissionRequest) -> JSON | None:
        if request.operation == "UPDATE":
            self.updates += 1
            if self.updates == 1:
                self.entered.set()
                await self.release.wait()
        return None

    async def validate(self, request: AdmissionRequest) -> None:
        return None


PATCHES: dict[str, Any] = {
    "merge": {"data": {"mine": "1"}},
    "strategic": {"data": {"mine": "1"}},
    "json": [{"op": "add", "path": "/data/mine", "value": "1"}],
}


async def _race(
    patch_type: str, make_patch: Callable[[JSON], Any]
) -> tuple[Store, SlowFirstWebhook, Any]:
    """Start the patch (or, for "update", the PUT), let another write land while its
    hook waits, then finish it."""
    store = Store()
    created = await store.create(
        "configmaps", {"metadata": {"name": "cm", "namespace": "default"}, "data": {}}
    )
    patch = make_patch(created)
    hook = SlowFirstWebhook()
    store.admission = hook
    if patch_type == "update":
        write = store.update("configmaps", patch)
    else:
        write = store.patch("configmaps", "default", "cm", patch, patch_type)
    patching = asyncio.create_task(write)
    await hook.entered.wait()
    store.admission = None  # the other writer is not slowed down
    await store.patch("configmaps", "default", "cm", {"data": {"theirs": "2"}})
    store.admission = hook
    hook.release.set()
    try:
        return store, hook, await patching
    except ApiError as exc:
        return store, hook, exc


@pytest.mark.parametrize("patch_type", sorted(PATCHES))
def test_an_unconditional_patch_is_applied_again_after_a_race(patch_type: str) -> None:
    async def body() -> None:
        store, hook, result = await _race(patch_type, lambda _: PATCHES[patch_type])
        assert not isinstance(result, ApiError), result.status
        assert result["data"] == {"theirs": "2", "mine": "1"}
        assert hook.updates == 2  # admission ran again on the newer object
        stored = await store.get("configmaps", "default", "cm")
        assert stored["data"] == {"theirs": "2", "mine": "1"}

    run(body())


def test_a_patch_naming_a_resource_version_still_gets_409_after_a_race() -> None:
    async def body() -> None:
        def conditional(created: JSON) -> JSON:
            # The version the patch was written against: current when it arrives.
            version = created["metadata"]["resourceVersion"]
            return {"metadata": {"resourceVersion": version}, "data": {"mine": "1"}}

        store, _, result = await _race("merge", conditional)
        assert isinstance(result, ApiError) and result.code == 409
        assert "the object has been modified" in result.message
        assert (await store.get("configmaps", "default", "cm"))["data"] == {"theirs": "2"}

    run(body())


def test_an_update_without_a_resource_version_is_made_again_after_a_race() -> None:
    async def body() -> None:
        def replace(_: JSON) -> JSON:
            return {"metadata": {"name": "cm", "namespace": "default"}, "data": {"mine": "1"}}

        store, hook, result = await _race("update", replace)
        assert not isinstance(result, ApiError), result.status
        assert hook.updates == 2
        # A PUT replaces: what the other write added is gone.
        assert (await store.get("configmaps", "default", "cm"))["data"] == {"mine": "1"}

    run(body())
