#!/bin/bash
# Links Debian's bcc package (python3-bpfcc: not on PyPI) into a plain venv's
# site-packages, and nothing else of the system: a venv made with
# --system-site-packages, or a .pth naming /usr/lib/python3/dist-packages, would expose
# every system package (pytest plugins included) to the exporter and its tests.
# Usage: link-bcc.sh VENV_DIR. Without python3-bpfcc it says so and links nothing:
# the eBPF collector is then unavailable (doctor says why), the rest runs.
set -euo pipefail
venv=$1
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# -I: Debian's python3 alone, not this checkout or PYTHONPATH.
bcc=$(/usr/bin/python3 -I -c 'import bcc, os; print(os.path.dirname(bcc.__file__))' 2>/dev/null) || {
    echo "link-bcc: python3-bpfcc is not installed; bcc not linked into $venv" >&2
    exit 0
}
ln -sfn "$bcc" "$site/bcc"
