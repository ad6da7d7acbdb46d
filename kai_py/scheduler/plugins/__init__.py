"""Built-in plugins; each has ``register(framework, config)``.

``default_framework`` is the framework a cycle runs with: these plugins, in
this order. It lives here, above the framework and the session, so that neither
needs to know the plugins (the session is given its framework).
"""

from __future__ import annotations

from kai_py.scheduler.framework import Framework
from kai_py.scheduler.model import Config
from kai_py.scheduler.plugins import nodeorder, pinning, predicates, priority, proportion


def default_framework(config: Config) -> Framework:
    framework = Framework()
    for plugin in (predicates, pinning, priority, proportion, nodeorder):
        plugin.register(framework, config)
    return framework
