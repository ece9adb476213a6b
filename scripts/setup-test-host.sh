#!/usr/bin/env bash
# Host set-up the test suite needs beyond packages (idempotent): tracefs/debugfs mounts
# and kernel headers where bcc looks for them. Safe to run again.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for part in "$here"/setup-test-host.d/*.sh; do
  [ -e "$part" ] || continue
  bash "$part"
done
