#!/usr/bin/env bash
# tests/deploy runs the exporter as an unprivileged user (nobody, uid 10001), as the image
# and the systemd unit do. That user must reach this checkout's venv and code: give "others"
# the right to traverse (x, not read) every folder above the checkout, e.g. a clone under
# /root. Idempotent; changes nothing where the path is already traversable.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$repo"
while [ "$dir" != "/" ]; do
  if [ "$(( 0$(stat -c %a "$dir") & 01 ))" -eq 0 ]; then
    chmod o+x "$dir"
  fi
  dir="$(dirname "$dir")"
done
