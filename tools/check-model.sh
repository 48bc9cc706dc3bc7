#!/usr/bin/env bash
# Checks a model file against its pinned sha256 in tests/data/models.sha256 (by file name).
# A file that does not match is removed, so the next `make models` makes it again, and no test
# reads it meanwhile.
set -euo pipefail
file=$1
sums=$(dirname "$0")/../tests/data/models.sha256
name=$(basename "$file")
want=$(awk -v f="$name" '$1 !~ /^#/ && $2 == f { print $1 }' "$sums")
if [ -z "$want" ]; then
  echo "check-model: no pinned sha256 for $name in $sums; add the sum of the reference file" >&2
  exit 1
fi
got=$(sha256sum "$file" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  rm -f "$file"
  echo "check-model: $file has sha256 $got, not the pinned $want (llama-quantize's output for a" >&2
  echo "check-model: derived model, the published file for a fetched one); removed it." >&2
  echo "check-model: a derived model that differs means locus quantize changed: see tests/quantize.rs." >&2
  exit 1
fi
