"""Built-in plugins; each has ``register(framework, config)``.

``default_framework`` is the framework a cycle runs with: these plugins, in
this order. It lives here, above the framework and the session, so that neither
needs to know the plugins (the session is given its framework).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from kai_py.scheduler.framework import Framework
from kai_py.scheduler.model import Config
from kai_py.scheduler.plugins import nodeorder, pinning, predicates, priority, proportion

#: The plugins by name, in the order they register (the operator times each one's
#: set-up for KAI's per-plugin metric).
PLUGINS: Final[dict[str, Callable[[Framework, Config], None]]] = {
    plugin.__name__.rsplit(".", 1)[1]: plugin.register
    for plugin in (predicates, pinning, priority, proportion, nodeorder)
}


def default_framework(config: Config) -> Framework:
    framework = Framework()
    for register in PLUGINS.values():
        register(framework, config)
    return framework
