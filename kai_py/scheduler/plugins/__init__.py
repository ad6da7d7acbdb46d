"""Built-in plugins; each has ``register(framework, config)``."""
