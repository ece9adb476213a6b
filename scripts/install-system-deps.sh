#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/apt-packages.txt (or the file given),
# skipping apt entirely when they are all present already. While another apt or dpkg
# holds the package lock (unattended-upgrades on a freshly booted machine), apt waits for
# it up to APT_LOCK_TIMEOUT seconds (default 300) instead of failing at once.
set -euo pipefail
list="${1:-$(dirname "$0")/apt-packages.txt}"
mapfile -t pkgs < <(grep -vE '^\s*(#|$)' "$list")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
timeout="${APT_LOCK_TIMEOUT:-300}"
case "$timeout" in ''|*[!0-9]*)
  echo "APT_LOCK_TIMEOUT=$timeout: a number of seconds is needed" >&2; exit 2;;
esac
echo "installing: ${missing[*]}" >&2
echo "(if another apt or dpkg is running, e.g. unattended-upgrades, apt waits up to" \
  "${timeout} s for its lock; APT_LOCK_TIMEOUT=N changes that)" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
lock=(-o "DPkg::Lock::Timeout=${timeout}")
fail() {
  echo "apt-get $1 failed: if another package manager held the lock for ${timeout} s, let" \
    "it finish (or raise APT_LOCK_TIMEOUT) and run this again" >&2
  exit 1
}
$SUDO apt-get "${lock[@]}" update -qq || fail update
$SUDO apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
  || fail install
