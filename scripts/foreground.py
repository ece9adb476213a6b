"""Run a command as the terminal's foreground job, as a shell with job control does.

Ctrl-C sends SIGINT to the terminal's foreground process group. Started straight from a
Makefile recipe, a long-running command (`make demo`) shares that group with `make`,
which then dies of the signal ("make: *** [demo] Interrupt", exit 2) however cleanly the
command itself stops. Here the command gets a process group of its own and the terminal:
Ctrl-C reaches it alone, and this exits with its exit status. SIGINT and SIGQUIT are
given back their default action for it, should make have been started with them ignored.
Without a terminal (CI, a pipe) the command just runs.

Usage: python3 scripts/foreground.py COMMAND [ARG...]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
        ours = os.tcgetpgrp(tty)
    except OSError:
        return _status(subprocess.call(argv))
    # A process outside the foreground group that sets the terminal's group is stopped by
    # SIGTTOU unless it ignores it.
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)

    def take_terminal() -> None:  # in the child, before exec: no window for a Ctrl-C
        os.setpgid(0, 0)
        os.tcsetpgrp(tty, os.getpgid(0))
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        # make may have been started with SIGINT ignored (from a background job, nohup, a
        # CI runner), and a shell cannot trap a signal ignored when it started: Ctrl-C
        # would do nothing. The terminal's foreground job gets it, as from a login shell.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)

    proc = subprocess.Popen(argv, preexec_fn=take_terminal)
    try:
        return _status(proc.wait())
    finally:
        os.tcsetpgrp(tty, ours)  # the terminal back to make (and the shell above it)


def _status(code: int) -> int:
    return code if code >= 0 else 128 - code  # killed by a signal: as a shell says


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
