#!/usr/bin/env bash
# Builds the controller and the webhook of an earlier commit (the release an
# upgrade starts from) into a directory: hack/build-previous.sh REF DIR.
# It builds in a temporary worktree of this repository, and does nothing if
# DIR already holds the binaries of REF.
set -euo pipefail

ref=$1
out=$2
if [[ -x "$out/webhook" && -x "$out/controller" && "$(cat "$out/REF" 2>/dev/null)" == "$ref" ]]; then
	exit 0
fi
if ! git cat-file -e "$ref^{commit}" 2>/dev/null; then
	echo "build-previous: commit $ref is not in this clone (a shallow clone? fetch its history)" >&2
	exit 1
fi
tmp=$(mktemp -d)
cleanup() { git worktree remove --force "$tmp" >/dev/null 2>&1 || rm -rf "$tmp"; }
trap cleanup EXIT
git worktree add --detach --quiet "$tmp" "$ref"
mkdir -p "$out"
echo "Building the controller and the webhook of $ref into $out"
(cd "$tmp" && CGO_ENABLED=0 go build -trimpath -o "$out/webhook" ./cmd/webhook && CGO_ENABLED=0 go build -trimpath -o "$out/controller" ./cmd/controller)
echo "$ref" >"$out/REF"
