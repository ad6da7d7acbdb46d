#!/usr/bin/env bash
# Build (once per machine) a real Prometheus server from its Go module, pinned,
# into a cache directory; print the binary's path.
#
#   scripts/prometheus-binary.sh       # build if missing, print the binary
#
# A second call finds the binary and returns at once. Nothing is downloaded
# but Go modules through the Go module proxy (GOPROXY). The web UI's assets
# are not embedded (no `builtinassets` tag): the tests use the HTTP API only.
# Prometheus 3.x is published as Go module versions v0.3xx.y.
set -euo pipefail

PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
GO=${GO:-go}
CACHE=${KAI_PY_PROMETHEUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kai-py/prometheus/$PROMETHEUS_VERSION}
BIN=$CACHE/bin

log() { echo "prometheus-binary: $*" >&2; }

if [ -x "$BIN/prometheus" ]; then
    echo "$BIN/prometheus"
    exit 0
fi

command -v "$GO" >/dev/null || { log "no Go toolchain ('$GO') on PATH"; exit 1; }
mkdir -p "$BIN"
t0=$SECONDS
# `go install pkg@version` builds outside any module, from the module's own
# go.mod; GOBIN puts the result into the cache, never into ~/go/bin.
GOBIN=$BIN.tmp GOTOOLCHAIN=${GOTOOLCHAIN:-local} \
    "$GO" install -trimpath -ldflags="-s -w" \
    "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
mv "$BIN.tmp/prometheus" "$BIN/prometheus"
rmdir "$BIN.tmp" 2>/dev/null || true
log "prometheus: go install took $((SECONDS - t0)) s"
echo "$BIN/prometheus"
