"""Annotations the simulated nodes read and write (kai-py's own, not KAI's).

They are not in ``kai_py.api.keys`` because only the emulator gives them
meaning; a real kubelet ignores them.
"""

from __future__ import annotations

from typing import Final

#: Set by users: the main containers exit after this many seconds of running.
RUN_SECONDS: Final = "kai-py.dev/run-seconds"
#: Set by users: the exit code they exit with (default 0). Non-zero fails the pod.
EXIT_CODE: Final = "kai-py.dev/exit-code"
#: Set by users: how long the containers take to stop after SIGTERM (default 0,
#: capped by terminationGracePeriodSeconds), so "Terminating" can be observed.
TERMINATION_SECONDS: Final = "kai-py.dev/termination-seconds"
#: Set by users: the containers run but are not Ready until this many seconds after
#: they started (an engine loading its model), as a readiness probe would hold them.
READY_SECONDS: Final = "kai-py.dev/ready-seconds"
#: Written by the kubelet: what the pod's containers see as NVIDIA_VISIBLE_DEVICES,
#: comma-separated GPU UUIDs, in container order (empty: no GPU).
VISIBLE_DEVICES: Final = "kai-py.dev/visible-devices"
#: On Node objects made by the emulator.
EMULATED_NODE: Final = "kai-py.dev/emulated"
