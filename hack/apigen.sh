#!/usr/bin/env bash
# Usage: apigen.sh <apigen binary> <CRD dir> <output dir>
# Converts the CRDs into kcp APIResourceSchemas and an APIExport.
#
# apigen regenerates only spec.resources of an APIExport file that already
# exists in the output directory and keeps everything else. The rest of the
# APIExport (its permission claims) is maintained by hand in
# hack/apigen/apiexport-*.yaml, so each run starts from that file and the
# result depends on the CRDs and the claims only. An APIResourceSchema keeps
# its name (which embeds a date and commit) as long as its spec is unchanged.
set -euo pipefail
apigen=$1 crds=$2 out=$3
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cp "$root"/hack/apigen/apiexport-*.yaml "$out"/
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "$apigen" --input-dir "$crds" --output-dir "$out" >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
