#!/usr/bin/env bash
# Usage: verify-clean.sh <what> <path>...
# Fails, showing the difference, when any of the given paths has changes that
# are not committed (for example after regenerating files).
set -euo pipefail
what=$1; shift
if [[ -n "$(git status --porcelain -- "$@")" ]]; then
  echo "ERROR: ${what} are not up to date:" >&2
  git status --porcelain -- "$@" >&2
  git --no-pager diff -- "$@" >&2
  exit 1
fi
