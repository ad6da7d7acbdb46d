"""The scheduling decisions: pure (no Kubernetes, no clock, no I/O) and typed, so
that it may be compiled by mypyc (see setup.py)."""


def compiled() -> bool:
    """True when this package runs as mypyc-compiled C extensions."""
    return not __file__.endswith(".py")


def build_name() -> str:
    """How this package runs, for what benchmarks print: "compiled by mypyc" or
    "interpreted"."""
    return "compiled by mypyc" if compiled() else "interpreted"
