"""Interface statistics from one rtnetlink link dump (RTM_GETLINK), decoded with
`struct`: only each link's name (IFLA_IFNAME) and its 64-bit counters (IFLA_STATS64,
`struct rtnl_link_stats64`; IFLA_STATS, 32-bit, on a kernel without them).

The kernel's own numbers, as pyroute2's `get_links()` read them before: decoding every
attribute of every link in Python was the biggest part of a 2-GPU scrape with host
metrics (docs/performance.md, issue #26).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterator
from typing import NamedTuple

# <linux/netlink.h>, <linux/rtnetlink.h>, <linux/if_link.h>
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_RTM_NEWLINK, _RTM_GETLINK = 16, 18
_NLM_F_REQUEST, _NLM_F_MULTI, _NLM_F_DUMP = 0x1, 0x2, 0x300
_IFLA_IFNAME, _IFLA_STATS, _IFLA_STATS64 = 3, 7, 23
_NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change
_ATTR = struct.Struct("=HH")  # rtattr: length, type
# rx_packets, tx_packets, rx_bytes, tx_bytes, rx_errors, tx_errors: the first six
_STATS64 = struct.Struct("=6Q")
_STATS32 = struct.Struct("=6I")
_BUFFER = 1 << 16  # a dump's parts are at most 32 KiB (the kernel's cap for one read)


class LinkCounters(NamedTuple):
    name: str
    receive_bytes: int
    transmit_bytes: int
    receive_errors: int
    transmit_errors: int


class LinkDump:
    """One rtnetlink socket of the exporter's network namespace, kept open between
    dumps and used from one thread at a time. OSError when it cannot be opened."""

    def __init__(self, timeout: float = 5.0) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                   socket.NETLINK_ROUTE)
        try:
            self._sock.bind((0, 0))
            self._sock.settimeout(timeout)  # a dump never waits on anyone; just in case
        except OSError:
            self._sock.close()
            raise
        self._seq = 0
        self._buffer = bytearray(_BUFFER)

    def links(self) -> list[LinkCounters]:
        """Every link that has a name and counters, in the kernel's order. OSError
        (with the kernel's errno) when the dump fails."""
        self._seq = seq = (self._seq + 1) & 0xFFFFFFFF
        request = _HEADER.pack(_HEADER.size + _IFINFO.size, _RTM_GETLINK,
                               _NLM_F_REQUEST | _NLM_F_DUMP, seq, 0)
        self._sock.send(request + _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        out: list[LinkCounters] = []
        view = memoryview(self._buffer)
        while True:
            size, _, flags, _ = self._sock.recvmsg_into([view])
            if flags & socket.MSG_TRUNC:
                raise OSError(errno.EMSGSIZE, "rtnetlink: a link dump part did not fit")
            for kind, offset, end in _messages(self._buffer, size, seq):
                if kind == _NLMSG_DONE:
                    return out
                if kind == _NLMSG_ERROR:
                    (code,) = struct.unpack_from("=i", self._buffer, offset)
                    if code:
                        raise OSError(-code, f"rtnetlink: {os.strerror(-code)}")
                    return out
                if kind == _RTM_NEWLINK:
                    link = _link(self._buffer, offset + _IFINFO.size, end)
                    if link is not None:
                        out.append(link)

    def close(self) -> None:
        self._sock.close()


def _messages(data: bytearray, size: int, seq: int) -> Iterator[tuple[int, int, int]]:
    """(type, payload offset, end) of each message of ours in one read."""
    offset = 0
    while offset + _HEADER.size <= size:
        length, kind, _, got_seq, _ = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size or offset + length > size:
            raise OSError(errno.EBADMSG, "rtnetlink: a malformed message")
        if got_seq == seq:  # an answer to an earlier, abandoned dump is skipped
            yield kind, offset + _HEADER.size, offset + length
        offset += (length + 3) & ~3


def _link(data: bytearray, offset: int, end: int) -> LinkCounters | None:
    name: str | None = None
    counters: tuple[int, ...] | None = None
    bits64 = False
    while offset + _ATTR.size <= end:
        length, kind = _ATTR.unpack_from(data, offset)
        if length < _ATTR.size:
            break
        payload, kind = offset + _ATTR.size, kind & _NLA_TYPE_MASK
        if kind == _IFLA_IFNAME:
            name = bytes(data[payload:offset + length]).split(b"\0", 1)[0].decode(
                "utf-8", "replace")
        elif kind == _IFLA_STATS64 and length - _ATTR.size >= _STATS64.size:
            counters, bits64 = _STATS64.unpack_from(data, payload), True
        elif (kind == _IFLA_STATS and not bits64
              and length - _ATTR.size >= _STATS32.size):
            counters = _STATS32.unpack_from(data, payload)
        offset += (length + 3) & ~3
    if not name or counters is None:
        return None
    _, _, rx_bytes, tx_bytes, rx_errors, tx_errors = counters
    return LinkCounters(name, rx_bytes, tx_bytes, rx_errors, tx_errors)
