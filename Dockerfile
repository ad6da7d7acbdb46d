# One image for every role of kai-py: scheduler, binder, pod-grouper, webhooks,
# node-agent and the program of the GPU reservation pods (`kai-py reserve`).
#
#   docker build -t ghcr.io/kai-py/kai-py:0.1.0 .
#
# Stage 1 builds a virtualenv (pip, wheel building, a C compiler) with the
# scheduler compiled by mypyc (KAI_PY_MYPYC=1, see setup.py: a cycle about twice
# as fast); stage 2 copies only that virtualenv onto a slim base, so the
# final image has no build tools and no pip cache.

ARG PYTHON_VERSION=3.12

FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/kai-py && python -m venv /opt/build
WORKDIR /src
# Dependencies first, so a code change does not reinstall them. The build venv also
# holds mypy (mypyc), which type-checks the scheduler against them.
COPY pyproject.toml README.md ./
COPY kai_py/__init__.py kai_py/__init__.py
RUN /opt/kai-py/bin/pip install --upgrade pip && /opt/kai-py/bin/pip install . \
    && /opt/build/bin/pip install ".[compile]"
COPY setup.py ./
COPY kai_py kai_py
# The wheel is built (and the scheduler compiled) by the build venv's mypyc, then
# installed into the runtime venv.
RUN KAI_PY_MYPYC=1 /opt/build/bin/pip wheel --no-build-isolation --no-deps -w /tmp/wheels . \
    && /opt/kai-py/bin/pip install --no-deps --force-reinstall /tmp/wheels/*.whl \
    && /opt/kai-py/bin/python -c "import kai_py.scheduler as s; assert s.compiled()" \
    && /opt/kai-py/bin/pip uninstall -y pip setuptools \
    && find /opt/kai-py -name '__pycache__' -prune -exec rm -rf {} +

FROM python:${PYTHON_VERSION}-slim
# Byte-code is not written at run time (the root filesystem may be read-only),
# output is not buffered (logs reach the container runtime at once).
ENV PATH=/opt/kai-py/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    KAI_PY_LOG_FORMAT=json
COPY --from=build /opt/kai-py /opt/kai-py
# A numeric, non-root user, so `runAsNonRoot: true` can be checked by the kubelet.
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["kai-py"]
CMD ["run"]
