#!/usr/bin/env bash
# Resolve the locks in locks/ from pyproject.toml: every package with its exact version
# and the hashes of its files, for CPython 3.11 on Linux (CI's and the image's Python).
#   runtime.txt  kai-py's dependencies: what the image ships
#   build.txt    those and the `compile` extra: the image's build stage (mypyc)
#   ci.txt       those and the `test` extra: what .ci/run installs
# Run after changing a dependency in pyproject.toml (tests/test_lock.py fails until
# then); `--upgrade` moves every pin to the newest version pyproject.toml allows.
#   pip install pip-tools && scripts/lock.sh [--upgrade]
set -euo pipefail
cd "$(dirname "$0")/.."

compile() {
    local out=$1; shift
    # kai-py names itself in its `test` extra (kai-py[compile]); pip-compile then lists
    # kai-py's own folder as a requirement, which is no package to lock.
    pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe \
        --unsafe-package kai-py --unsafe-package pip --no-emit-index-url --no-emit-find-links \
        --output-file "$out" "$@" pyproject.toml
    sed -i -e '/^kai-py @ /,/^    # via/d' -e '/^# The following packages are considered to be unsafe/d' "$out"
}

compile locks/runtime.txt "$@"
compile locks/build.txt --extra compile "$@"
compile locks/ci.txt --extra test --extra compile "$@"
