#!/usr/bin/env bash
# Usage: build-kcp.sh [output dir] [binary...]
# Builds the pinned kcp binaries (kcp, kcp-front-proxy, cache-server,
# sharded-test-server), apigen and a matching kubectl from the tools module in
# hack/tools/kcp into
# the output directory (default: bin). With binary names, only those are built.
# A binary is rebuilt only when it is missing or was built from other pins: a
# stamp file next to it records the checksum of the tools module.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-"$root/bin"}
shift || true
mkdir -p "$out"
out=$(cd "$out" && pwd)
tools="$root/hack/tools/kcp"

all=(kcp kcp-front-proxy cache-server sharded-test-server apigen kubectl)
binaries=("$@")
[[ ${#binaries[@]} -gt 0 ]] || binaries=("${all[@]}")

kcp_version=$(awk '$1 == "github.com/kcp-dev/kcp" { print $2; exit }' "$tools/go.mod")
kube_version=v1.35.1
pins=$(cat "$tools/go.mod" "$tools/go.sum" | sha256sum | cut -d' ' -f1)

pkg() {
  case "$1" in
    apigen) echo github.com/kcp-dev/sdk/cmd/apigen ;;
    kubectl) echo k8s.io/kubernetes/cmd/kubectl ;;
    kcp|kcp-front-proxy|cache-server|sharded-test-server) echo "github.com/kcp-dev/kcp/cmd/$1" ;;
    *) echo "unknown kcp tool: $1 (known: ${all[*]})" >&2; exit 1 ;;
  esac
}

# kubectl and client-go refuse a server that reports no version, so stamp the
# same version variables as kcp's own Makefile does.
major=${kube_version#v}; major=${major%%.*}
minor=${kube_version#v*.}; minor=${minor%%.*}
ldflags=""
for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X ${p}.gitVersion=${kube_version}+kcp-${kcp_version}"
  ldflags+=" -X ${p}.gitMajor=${major} -X ${p}.gitMinor=${minor}"
  ldflags+=" -X ${p}.gitCommit=${kcp_version} -X ${p}.gitTreeState=clean"
  ldflags+=" -X ${p}.buildDate=1970-01-01T00:00:00Z"
done

# wait_timeout <pid> <seconds> returns 0 when the process has exited, 1 if
# it is still running after the given time.
wait_timeout() {
  local i
  for ((i = 0; i < $2; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 1
  done
  kill -0 "$1" 2>/dev/null && return 1
  return 0
}

cd "$tools"
for b in "${binaries[@]}"; do
  target=$(pkg "$b")
  stamp="$out/.$b.stamp"
  if [[ -x "$out/$b" && -f "$stamp" && "$(cat "$stamp")" == "$pins" ]]; then
    continue
  fi
  echo "Building ${b} from kcp ${kcp_version} pins (the first kcp build takes several minutes)..."
  start=$SECONDS
  rm -f "$stamp"
  # The first build compiles kcp and its Kubernetes fork (minutes); show that
  # it is alive.
  CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "$out/$b" "$target" &
  pid=$!
  while ! wait_timeout "$pid" 30; do
    echo "  still building ${b} ($((SECONDS - start))s elapsed)..."
  done
  wait "$pid"
  echo "$pins" > "$stamp"
  echo "Built ${out}/${b} in $((SECONDS - start))s"
done
