"""Where a 1 Hz scrape's CPU goes: the real exporter (default collectors, host included)
on the fake node of GPUS H100s and PROCESSES GPU processes (`fleet.scenario`), scraped
once a second with Prometheus 2's Accept header for SECONDS after a warm-up, sampled by
py-spy (every thread, idle ones left out) for those SECONDS only. Prints the CPU per
second py-spy saw and the TOP functions by cumulative (inclusive) samples, with their
self samples, from py-spy's collapsed stacks.

    pip install --target /tmp/pyspy py-spy
    PYSPY=/tmp/pyspy/bin/py-spy python -m tests.bench.profile_onehz 8 200 60 [TOP]

Not a test (py-spy is no dev dependency): docs/performance.md, issue #34, keeps its output.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path

from tests.bench import fleet
from tests.bench.paired import _first_scrape, scrape
from tests.fake_nvml import scenario as fake
from tests.helpers import eventually, free_port, stop_process

RATE = 1000  # samples a second per thread


def _frame(text: str) -> str:
    """`function (path:line)` less the line, the path from the package or stdlib on."""
    name, _, where = text.partition(" (")
    path = where.rsplit(":", 1)[0]
    for marker in ("gpu_exporter/", "site-packages/", "python3."):
        if marker in path:
            path = path[path.index(marker):]
            break
    return f"{name} ({path})"


def profile(gpus: int, processes: int, seconds: int, top: int) -> None:
    pyspy = os.environ.get("PYSPY", "py-spy")
    with tempfile.TemporaryDirectory() as tmp:
        path = fleet.scenario(gpus, processes).write(Path(tmp) / "node.scenario")
        env = {**os.environ, **fake.env(fake.build(), path)}
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpu_exporter", f"--web.listen-address=127.0.0.1:{port}"],
            env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            conn: http.client.HTTPConnection = eventually(
                partial(_first_scrape, proc, port), 60, "the first scrape", interval=0.2,
                retry_on=(AssertionError, OSError))
            for _ in range(10):
                scrape(conn)
            raw = Path(tmp) / "stacks.txt"
            spy = subprocess.Popen(
                [pyspy, "record", "--pid", str(proc.pid), "--rate", str(RATE),
                 "--duration", str(seconds), "--format", "raw", "--output", str(raw),
                 "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1)  # py-spy attached
            done = threading.Event()
            start = time.monotonic()
            n = 0
            while time.monotonic() - start < seconds - 1 and spy.poll() is None:
                scrape(conn)
                n += 1
                done.wait(max(0.0, start + n - time.monotonic()))
            _, err = spy.communicate(timeout=seconds + 60)
            assert raw.exists(), err.decode()
            report(raw.read_text(), seconds, n, top)
        finally:
            stop_process(proc)


def report(stacks: str, seconds: int, scrapes: int, top: int) -> None:
    total = 0
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    own_lines: Counter[str] = Counter()  # self samples by line, for the top self entries
    for line in stacks.splitlines():
        frames_text, _, count_text = line.rpartition(" ")
        if not frames_text:
            continue
        count = int(count_text)
        frames = [_frame(f) for f in frames_text.split(";")]
        total += count
        for f in set(frames):
            inclusive[f] += count
        own[frames[-1]] += count
        own_lines[frames_text.split(";")[-1]] += count
    ms_per_s = total / RATE * 1000 / seconds
    print(f"{seconds} s, {scrapes} scrapes: {total} samples at {RATE} Hz = {ms_per_s:.1f} ms "
          "of CPU per second (py-spy's sampling, idle threads left out)")
    print(f"{'cumulative':>10} {'self':>6}  function (ms per scrape)")
    for f, count in inclusive.most_common(top):
        per_scrape = count / RATE * 1000 / max(1, scrapes)
        print(f"{100 * count / total:9.1f}% {100 * own[f] / total:5.1f}%  {f} "
              f"({per_scrape:.2f})")
    print(f"{'self':>10}  line")
    for f, count in own_lines.most_common(top):
        print(f"{100 * count / total:9.1f}%  {f}")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    profile(args[0], args[1], args[2], args[3] if len(args) > 3 else 15)
