#!/usr/bin/env bash
# Build kai-py's image with buildah and run it: `kai-py --version`, `kai-py simulate
# examples/simulate/` and the check that the scheduler is the compiled one.
#
# CI machines reach Debian's packages and PyPI but no container registry, so the
# Python base image is made here with debootstrap from Debian's packages (bookworm's
# python3) and given to the Dockerfile as BASE_IMAGE. The base's root file system and
# buildah's storage (with its layer cache) are kept under $KAI_PY_IMAGE_CACHE, so a
# second run reuses both. Runs as root (debootstrap, and buildah's chroot isolation).
#
#   scripts/image-build.sh            # build, run the three checks, print timings
#   KAI_PY_IMAGE_CACHE=/some/dir scripts/image-build.sh
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${KAI_PY_IMAGE_CACHE:-/root/.cache/kai-py/image}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the base holds: Debian's python3 and its venv module (the Dockerfile makes two
# virtualenvs); CA certificates for pip in the build stage.
BASE_PACKAGES=python3,python3-venv,ca-certificates
# The base is remade when what it is made from changes (the Debian suite or the list).
BASE_KEY=$(printf '%s %s' "$SUITE" "$BASE_PACKAGES" | sha256sum | cut -c1-12)
BASE_TAR=$CACHE/base-$SUITE-$BASE_KEY.tar
BASE_IMAGE=localhost/kai-py-base:$SUITE-$BASE_KEY
IMAGE=localhost/kai-py:ci

# buildah's storage: the kernel's overlay where root may mount one here (each layer
# holds only what its step changed), else vfs (a whole copy of the tree per layer:
# several times the disk and time, but it needs nothing of the kernel). Chroot
# isolation needs no user namespaces. Both work as root in a bare container or VM.
storage_driver() {
    local d
    d=$(mktemp -d "${TMPDIR:-/tmp}/kai-py-overlay-probe.XXXXXX")
    mkdir -p "$d/lower" "$d/upper" "$d/work" "$d/merged"
    if mount -t overlay overlay \
        -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2>/dev/null; then
        umount "$d/merged"
        echo overlay
    else
        echo vfs
    fi
    rm -rf "$d"
}
DRIVER=${KAI_PY_IMAGE_STORAGE_DRIVER:-$(storage_driver)}
BUILDAH=(buildah --root "$CACHE/storage-$DRIVER" --runroot "${TMPDIR:-/tmp}/kai-py-buildah-run-$DRIVER"
         --storage-driver "$DRIVER")
export BUILDAH_ISOLATION=chroot
# Each build whose sources changed leaves its layers behind; past this size the
# storage is emptied and the next build starts cold (the base's tar stays).
STORAGE_LIMIT_GB=${KAI_PY_IMAGE_STORAGE_LIMIT_GB:-20}

need() {
    local missing=()
    command -v buildah >/dev/null || missing+=(buildah)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    if [ ${#missing[@]} -gt 0 ]; then
        apt-get update -qq
        # With their recommends: debootstrap checks the suite's signature with
        # debian-archive-keyring and gnupg.
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

now() { date +%s; }
took() { echo "image: $1 took $(( $(now) - $2 )) s"; }

make_base() {
    local t0 rootfs
    t0=$(now)
    if [ ! -s "$BASE_TAR" ]; then
        rootfs=$(mktemp -d "${TMPDIR:-/tmp}/kai-py-rootfs.XXXXXX")
        debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs" "$MIRROR" \
            >"$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log"; exit 1; }
        # Package lists and apt's download cache are not part of an image.
        rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
        tar -C "$rootfs" -cf "$BASE_TAR.part" --numeric-owner .
        rm -rf "$rootfs"
        mv "$BASE_TAR.part" "$BASE_TAR"
    fi
    if ! "${BUILDAH[@]}" inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
        local ctr
        ctr=$("${BUILDAH[@]}" from scratch)
        "${BUILDAH[@]}" add "$ctr" "$BASE_TAR" / >/dev/null
        "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            --cmd python3 "$ctr"
        "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
    fi
    took "base image ($BASE_IMAGE)" "$t0"
}

build() {
    local t0 ca ca_args=()
    t0=$(now)
    # A machine that reaches PyPI through a TLS proxy names the proxy's CA bundle in
    # pip's settings; the build's pip is shown the same bundle (mounted, not copied:
    # it stays out of the image).
    ca=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
    if [ -n "$ca" ] && [ -f "$ca" ]; then
        ca_args=(--volume "$ca:/run/kai-py-build-ca.crt:ro" --build-arg PIP_CA_BUNDLE=/run/kai-py-build-ca.crt)
    fi
    # --layers keeps each step's result, so an unchanged lock does not reinstall the
    # dependencies and unchanged sources are not compiled again.
    "${BUILDAH[@]}" bud --quiet --layers --pull-never \
        --build-arg BASE_IMAGE="$BASE_IMAGE" "${ca_args[@]}" -t "$IMAGE" . >/dev/null
    took "build" "$t0"
}

run_checks() {
    local t0 ctr
    t0=$(now)
    ctr=$("${BUILDAH[@]}" from --pull-never "$IMAGE")
    trap '"${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1 || true' RETURN
    # buildah run takes the image's user (65532) and working folder (/tmp); the
    # examples are copied in, since the image does not carry them.
    "${BUILDAH[@]}" copy --chown 65532:65532 "$ctr" examples/simulate /tmp/simulate >/dev/null
    "${BUILDAH[@]}" run "$ctr" -- kai-py --version
    "${BUILDAH[@]}" run "$ctr" -- kai-py simulate /tmp/simulate/ >/dev/null
    echo "image: kai-py simulate examples/simulate/ ran"
    "${BUILDAH[@]}" run "$ctr" -- id -u
    "${BUILDAH[@]}" run "$ctr" -- python -c \
        "import kai_py.scheduler as s; assert s.compiled(), s.__file__; print('image: scheduler compiled')"
    # Every module imports with what the image holds (it leaves part of a dependency out).
    "${BUILDAH[@]}" run "$ctr" -- python -c "import importlib, pkgutil, kai_py, kopf
# __main__ modules run their program when imported (python -m): not a library import.
names = [m.name for m in pkgutil.walk_packages(kai_py.__path__, 'kai_py.')
         if not m.name.endswith('.__main__')]
for name in names:
    importlib.import_module(name)
print('image: all', len(names), 'modules of kai_py import')"
    took "checks" "$t0"
}

sizes() {
    # The size of each layer (uncompressed) with the step that made it: the image's
    # history, less its empty-layer steps, lines up with the manifest's layers.
    "${BUILDAH[@]}" inspect --type image "$IMAGE" | python3 -c '
import json, sys
info = json.load(sys.stdin)
layers = json.loads(info["Manifest"])["layers"]
steps = [h for h in info["OCIv1"].get("history", []) if not h.get("empty_layer")]
total = 0
for step, layer in zip(steps, layers):
    total += layer["size"]
    print("image: layer %7.1f MB  %s" % (layer["size"] / 1e6, step.get("created_by", "")[:90]))
print("image: total %7.1f MB" % (total / 1e6))
'
}

mkdir -p "$CACHE"
T0=$(now)
need
if [ -d "$CACHE/storage-$DRIVER" ] && \
    [ "$(du -s --block-size=1G "$CACHE/storage-$DRIVER" | cut -f1)" -gt "$STORAGE_LIMIT_GB" ]; then
    echo "image: buildah's storage is over ${STORAGE_LIMIT_GB} GB: emptied, this build starts cold"
    "${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true
    "${BUILDAH[@]}" rmi --all --force >/dev/null 2>&1 || true
fi
echo "image: storage driver $DRIVER"
make_base
build
run_checks
sizes
took "all image steps" "$T0"
