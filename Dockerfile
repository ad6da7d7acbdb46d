# One image for every role of kai-py: scheduler, binder, pod-grouper, webhooks,
# node-agent and the program of the GPU reservation pods (`kai-py reserve`).
#
#   docker build -t ghcr.io/kai-py/kai-py:0.1.0 .
#   buildah bud --build-arg BASE_IMAGE=my-registry/python:3.11-slim -t kai-py .
#
# Stage 1 builds a virtualenv (pip, wheel building, a C compiler) with the
# scheduler compiled by mypyc (KAI_PY_MYPYC=1, see setup.py: a cycle about twice
# as fast); stage 2 copies only that virtualenv onto the same base, so the
# final image has no build tools and no pip cache.
#
# BASE_IMAGE is any Debian-based image with CPython 3.11 as `python3` and its venv
# module: the official slim image (the default), or one made from Debian's own
# python3 and python3-venv (scripts/image-build.sh makes one with debootstrap). Both
# stages use it, since the virtualenv links to the base's python3. The packages come
# from locks/ (exact versions with their hashes, resolved for CPython 3.11 on Linux),
# so two builds a day apart install the same files.

ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Where PyPI is reached through a proxy with its own certificate authority: the path,
# inside the build, of a CA bundle pip trusts, mounted there for the build only
# (`buildah bud --volume BUNDLE:PATH:ro --build-arg PIP_CA_BUNDLE=PATH`, as
# scripts/image-build.sh does). Unset, pip uses its own.
ARG PIP_CA_BUNDLE
# The official image carries CPython's headers; Debian's python3 has them in
# python3-dev, which the compiled scheduler's C extensions need.
RUN apt-get update \
    && headers=$(python3 -c 'import os, sysconfig; print("" if os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")) else "python3-dev")') \
    && apt-get install -y --no-install-recommends gcc libc6-dev $headers \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/kai-py && python3 -m venv /opt/build
WORKDIR /src
# Dependencies first, so a code change does not reinstall them. The build venv also
# holds mypy (mypyc), which type-checks the scheduler against them.
COPY locks/runtime.txt locks/build.txt locks/
# The `kubernetes` package carries a second, asyncio copy of its whole client
# (`kubernetes.aio`, about half the package); neither kai-py nor Kopf imports it
# (kai-py's async calls go through its own HTTP stack), so the image leaves it out.
RUN /opt/kai-py/bin/pip install ${PIP_CA_BUNDLE:+--cert "$PIP_CA_BUNDLE"} --require-hashes -r locks/runtime.txt \
    && rm -rf /opt/kai-py/lib/python3*/site-packages/kubernetes/aio \
    && /opt/build/bin/pip install ${PIP_CA_BUNDLE:+--cert "$PIP_CA_BUNDLE"} --require-hashes -r locks/build.txt
COPY pyproject.toml README.md setup.py ./
COPY kai_py kai_py
# The wheel is built (and the scheduler compiled) by the build venv's mypyc, then
# installed into the runtime venv. The check runs from / : in /src, Python would
# import the copied sources instead of the installed package.
RUN KAI_PY_MYPYC=1 /opt/build/bin/pip wheel --no-build-isolation --no-deps -w /tmp/wheels . \
    && /opt/kai-py/bin/pip install --no-deps --force-reinstall /tmp/wheels/*.whl \
    && cd / && /opt/kai-py/bin/python -c "import kai_py.scheduler as s; assert s.compiled(), s.__file__" \
    && /opt/kai-py/bin/pip uninstall -y pip setuptools \
    && find /opt/kai-py -name '__pycache__' -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
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
