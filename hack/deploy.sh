#!/usr/bin/env bash
# Applies (or removes) the project's kcp-side objects. Used by the Makefile:
#
#   deploy.sh deploy      into DEPCTRL_WORKSPACE
#   deploy.sh undeploy
#
# KUBECONFIG must point at kcp through the front-proxy (any workspace).
# DEPCTRL_WORKSPACE is the workspace path of the dep-ctrl workspace (default
# root:dep-ctrl); missing workspaces on the way are created.
set -euo pipefail

root_dir=$(cd "$(dirname "$0")/.." && pwd)
KUBECTL=${KUBECTL:-$root_dir/bin/kubectl}
KUSTOMIZE=${KUSTOMIZE:-$root_dir/bin/kustomize}
DEPCTRL_WORKSPACE=${DEPCTRL_WORKSPACE:-root:dep-ctrl}

die() { echo "error: $*" >&2; exit 1; }

# KUBECTL_CONTEXT, if set, selects the kubeconfig context.
context_args=()
[[ -z "${KUBECTL_CONTEXT:-}" ]] || context_args=(--context "$KUBECTL_CONTEXT")

# server_base prints the kubeconfig's server URL without /clusters/...
server_base() {
  local server
  server=$("$KUBECTL" "${context_args[@]}" config view --minify -o jsonpath='{.clusters[0].cluster.server}') ||
    die "cannot read the server from the kubeconfig (KUBECONFIG=${KUBECONFIG:-~/.kube/config})"
  [[ -n "$server" ]] || die "the kubeconfig's current context has no server"
  echo "${server%%/clusters/*}"
}

# k <workspace> <kubectl args...> runs kubectl against one workspace.
k() {
  local ws=$1; shift
  "$KUBECTL" "${context_args[@]}" --server "$base/clusters/$ws" "$@"
}

# ensure_workspace <path> creates every missing workspace along path and waits
# until each is ready.
ensure_workspace() {
  [[ "$1" =~ ^root(:[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$ ]] || die "invalid workspace path $1"
  local parent=root seg
  IFS=: read -ra segs <<< "${1#root}"
  for seg in "${segs[@]}"; do
    [[ -n "$seg" ]] || continue
    if ! k "$parent" get workspaces.tenancy.kcp.io "$seg" >/dev/null 2>&1; then
      echo "Creating workspace $parent:$seg"
      k "$parent" create -f - <<YAML
apiVersion: tenancy.kcp.io/v1alpha1
kind: Workspace
metadata:
  name: $seg
YAML
    fi
    k "$parent" wait --for=jsonpath='{.status.phase}'=Ready --timeout=120s "workspaces.tenancy.kcp.io/$seg" >/dev/null
    parent="$parent:$seg"
  done
}

# build <kustomization dir>
build() {
  "$KUSTOMIZE" build "$root_dir/$1"
}

cmd=${1:-}
case "$cmd" in
  deploy)
    base=$(server_base)
    ensure_workspace "$DEPCTRL_WORKSPACE"
    echo "Applying config/deploy/dep-ctrl (DependencyRule APIResourceSchema and APIExport, controller and webhook RBAC) to $DEPCTRL_WORKSPACE:"
    build config/deploy/dep-ctrl | k "$DEPCTRL_WORKSPACE" apply -f -
    # kcp creates the APIExportEndpointSlice of the export shortly after it.
    k "$DEPCTRL_WORKSPACE" wait --for=create --timeout=60s \
      apiexportendpointslices.apis.kcp.io/dependencies.opendefense.cloud >/dev/null
    echo "Deployed to $base: the APIExport dependencies.opendefense.cloud is in $DEPCTRL_WORKSPACE."
    echo "Next: run the controller and the webhook with kubeconfigs pointing at $base/clusters/$DEPCTRL_WORKSPACE (docs/operations.md)."
    ;;
  undeploy)
    base=$(server_base)
    echo "Removing config/deploy/dep-ctrl from $DEPCTRL_WORKSPACE:"
    build config/deploy/dep-ctrl | k "$DEPCTRL_WORKSPACE" delete --ignore-not-found -f -
    echo "The workspace $DEPCTRL_WORKSPACE itself is kept."
    ;;
  *)
    die "usage: $0 deploy|undeploy"
    ;;
esac
