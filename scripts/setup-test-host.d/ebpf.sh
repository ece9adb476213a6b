#!/usr/bin/env bash
# eBPF test host set-up (idempotent, run as root by scripts/setup-test-host.sh):
# tracefs/debugfs mounted, and kernel headers where bcc looks for them. With no headers
# for the running kernel, Debian's linux-headers-amd64 (a different version) is good
# enough for uprobe programs, which use no kernel struct layouts.
set -euo pipefail
if [ "$(uname -s)" != Linux ]; then exit 0; fi
if [ ! -e /sys/kernel/tracing/uprobe_events ]; then
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
fi
if [ -d /sys/kernel/debug ] && ! mountpoint -q /sys/kernel/debug; then
  mount -t debugfs nodev /sys/kernel/debug || true
fi
mod="/lib/modules/$(uname -r)"
if [ ! -e "$mod/build/include" ]; then
  ver="$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1)"
  if [ -z "$ver" ]; then
    echo "ebpf.sh: no /usr/src/linux-headers-*-amd64 (apt package linux-headers-amd64)" >&2
    exit 1
  fi
  common="${ver%-amd64}-common"
  mkdir -p "$mod"
  ln -sfn "$ver" "$mod/build"
  [ -d "$common" ] && ln -sfn "$common" "$mod/source"
fi
