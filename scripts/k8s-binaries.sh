#!/usr/bin/env bash
# Build (once per machine) a real kube-apiserver, kube-controller-manager and
# etcd from their Go modules, pinned, into a cache directory; print that
# directory.
#
#   scripts/k8s-binaries.sh            # build if missing, print the bin dir
#
# A second call finds the binaries and returns at once. Nothing is
# downloaded but Go modules through the Go module proxy (GOPROXY).
# Times on a loaded 2-core machine with a cold Go build cache: kube-apiserver
# about 8 min (go mod tidy ~20 s), kube-controller-manager 3-4 min more
# (most packages are shared), etcd about 1.5 min; with a warm Go build cache,
# under a minute in all.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
GO=${GO:-go}
CACHE=${KAI_PY_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kai-py/k8s/$K8S_VERSION}
BIN=$CACHE/bin

log() { echo "k8s-binaries: $*" >&2; }

if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] && [ -x "$BIN/etcd" ]; then
    echo "$BIN"
    exit 0
fi

command -v "$GO" >/dev/null || { log "no Go toolchain ('$GO') on PATH"; exit 1; }
mkdir -p "$BIN"
staging_version=v0.${K8S_VERSION#v1.}   # v1.37.2 -> v0.37.2

build_kubernetes() {
    local dir=$CACHE/src/kubernetes
    rm -rf "$dir"; mkdir -p "$dir"
    # k8s.io/kubernetes' go.mod replaces its staging modules with local
    # paths (./staging/src/k8s.io/...), which do not exist in the module
    # zip: replace each with its published version of the same number.
    local mod
    mod=$(cd "$dir" && GOFLAGS=-mod=mod "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
          | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    [ -f "$mod" ] || { log "could not download k8s.io/kubernetes@$K8S_VERSION's go.mod"; exit 1; }
    {
        echo "module kaipy.local/k8sbuild"
        echo
        echo "go 1.26.0"
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        echo "replace ("
        grep -E '^[[:space:]]*k8s\.io/[^ ]+ => \./staging/' "$mod" \
            | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
        echo ")"
    } > "$dir/go.mod"
    cat > "$dir/tools.go" <<'GOEOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
GOEOF
    local t0=$SECONDS
    (cd "$dir" && "$GO" mod tidy)
    log "kubernetes: go mod tidy took $((SECONDS - t0)) s"
    t0=$SECONDS
    local pkg=k8s.io/component-base/version
    local ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1"
    ldflags+=" -X $pkg.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
    local cmd
    for cmd in kube-apiserver kube-controller-manager; do
        t0=$SECONDS
        (cd "$dir" && "$GO" build -trimpath -ldflags="$ldflags" -o "$BIN/$cmd.tmp" \
            "k8s.io/kubernetes/cmd/$cmd")
        mv "$BIN/$cmd.tmp" "$BIN/$cmd"
        log "$cmd: go build took $((SECONDS - t0)) s"
    done
}

build_etcd() {
    local dir=$CACHE/src/etcd
    rm -rf "$dir"; mkdir -p "$dir"
    printf 'module kaipy.local/etcdbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
        "$ETCD_VERSION" > "$dir/go.mod"
    cat > "$dir/main.go" <<'GOEOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GOEOF
    local t0=$SECONDS
    (cd "$dir" && "$GO" mod tidy)
    log "etcd: go mod tidy took $((SECONDS - t0)) s"
    t0=$SECONDS
    (cd "$dir" && "$GO" build -trimpath -ldflags="-s -w" -o "$BIN/etcd.tmp" .)
    mv "$BIN/etcd.tmp" "$BIN/etcd"
    log "etcd: go build took $((SECONDS - t0)) s"
}

[ -x "$BIN/etcd" ] || build_etcd
[ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] || build_kubernetes
log "built into $BIN"
echo "$BIN"
