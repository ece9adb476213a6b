#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/apt-packages.txt (or the file given),
# skipping apt entirely when they are all present already.
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
echo "installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
