"""A cheap stand-in for many GPU nodes: one process serves a recorded scrape body of the
real exporter on N loopback ports, one port per simulated node, each with its own
identity (host name, GPU UUIDs, serial numbers) and its own jitter on the gauges that move
(clocks, power, utilization: ±`jitter` of the recorded value, drawn afresh at most once
per `period`). Counters are replayed as recorded (their rate is 0): what storage pays for a
series does not depend on its value.

At 64 and 128 nodes, 128 exporter processes on a 2-core machine would measure their
contention, not the scrape side's cost; the exporter's own cost per scrape is measured
apart (docs/performance.md).

    python -m tests.fleetsim.replay BODY --nodes N [--first-node K] [--jitter 0.03]
        serve; prints one JSON line {"ports": [...]} when every port listens, then runs
        until SIGTERM
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

# The gauges a busy fleet moves from one scrape to the next.
JITTERED = re.compile(r"^(hw_gpu_clock_hertz|hw_gpu_power_draw_watts|hw_gpu_utilization_ratio|"
                      r"hw_gpu_sm_active_ratio|hw_gpu_pipe_active_ratio|hw_gpu_tensor_active_ratio|"
                      r"hw_gpu_dram_active_ratio|hw_gpu_sm_occupancy_ratio)[{ ]")
RECORDED_HOST = "fleetsim-recorded"
# The UUIDs of tests/fake_nvml/scenario.h100(i): GPU-{i:08x}-1111-2222-...; the second
# group is the node's number in the simulation.
UUID_GROUP = "-1111-2222-"
SERIAL_PREFIX = "165232300"


def node_name(n: int) -> str:
    return f"sim-node-{n:04d}"


def node_uuid_group(n: int) -> str:
    return f"-{n:04x}-2222-"


def node_serial_prefix(n: int) -> str:
    return f"1652{n:05d}"


@dataclass(frozen=True)
class Line:
    head: str  # everything before the value, with the node's identity in it
    value: float | None  # None: a comment, or a line replayed as is
    text: str


def personalise(body: str, n: int) -> str:
    """The recorded body as node `n` would answer it (before jitter)."""
    return (body.replace(RECORDED_HOST, node_name(n))
            .replace(UUID_GROUP, node_uuid_group(n))
            .replace(SERIAL_PREFIX, node_serial_prefix(n)))


def parse_lines(body: str) -> list[Line]:
    out = []
    for raw in body.splitlines():
        if raw and not raw.startswith("#") and JITTERED.match(raw):
            head, _, val = raw.rpartition(" ")
            out.append(Line(head, float(val), raw))
        else:
            out.append(Line(raw, None, raw))
    return out


class Node:
    """One simulated node's answer, redrawn at most once per `period` seconds."""

    def __init__(self, body: str, n: int, jitter: float, period: float) -> None:
        self.lines = parse_lines(personalise(body, n))
        self.jitter = jitter
        self.period = period
        self.rng = random.Random(n)
        self.drawn_at = -1e18
        self.rendered = b""

    def render(self, now: float) -> bytes:
        if now - self.drawn_at >= self.period:
            j, rnd = self.jitter, self.rng.uniform
            parts = [ln.text if ln.value is None else
                     f"{ln.head} {ln.value * (1 + rnd(-j, j)):.6g}" for ln in self.lines]
            self.rendered = ("\n".join(parts) + "\n").encode()
            self.drawn_at = now
        return self.rendered


async def _serve(nodes: Sequence[Node]) -> None:
    async def handler(node: Node, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: vmagent reuses its connection
                request = await reader.readuntil(b"\r\n\r\n")
                if not request:
                    break
                body = node.render(time.monotonic())
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    servers = []
    for node in nodes:
        servers.append(await asyncio.start_server(
            lambda r, w, node=node: handler(node, r, w), "127.0.0.1", 0))
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    print(json.dumps({"ports": ports}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    for s in servers:
        s.close()


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fleetsim.replay")
    ap.add_argument("body", help="a recorded scrape body (host name fleetsim-recorded)")
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--first-node", type=int, default=0)
    ap.add_argument("--jitter", type=float, default=0.03)
    ap.add_argument("--period", type=float, default=1.0,
                    help="seconds between two draws of a node's jitter")
    a = ap.parse_args(argv)
    with open(a.body) as f:
        body = f.read()
    nodes = [Node(body, a.first_node + i, a.jitter, a.period) for i in range(a.nodes)]
    asyncio.run(_serve(nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
