#!/usr/bin/env bash
# Fails if git tracks a file that a build makes: a binary (a file with a NUL
# byte) or anything larger than 1 MB. Generated manifests are exempt from the
# size limit by path.
set -euo pipefail
cd "$(dirname "$0")/.."

max=$((1024 * 1024))
# Generated YAML may grow with the API; it is checked by `make verify` for
# staleness instead.
exempt='^config/(crd|kcp)/.*\.yaml$'

bad=()
while IFS= read -r -d '' f; do
  [[ -f "$f" ]] || continue
  size=$(stat -c %s "$f")
  if ((size > max)) && ! [[ "$f" =~ $exempt ]]; then
    bad+=("$f: $size bytes (limit $max)")
    continue
  fi
  if LC_ALL=C grep -qaP '\x00' -- "$f"; then
    bad+=("$f: binary content")
  fi
done < <(git ls-files -z)

if ((${#bad[@]} > 0)); then
  echo "Tracked files that look like build output (remove them with 'git rm --cached' and ignore them in .gitignore):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
