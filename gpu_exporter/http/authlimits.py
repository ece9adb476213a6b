"""What bounds the bcrypt work of basic auth, per source address, before any bcrypt runs.

A bcrypt check costs tens to hundreds of milliseconds of CPU by design, so clients sending
wrong passwords could keep it busy. Two bounds, both decided before bcrypt is asked:

- `FailureBudget`: each source address has a budget of checks that may fail (a token
  bucket: `burst` at once, then `per_second`); a check is charged when it is asked for
  and refunded when it passes, so a scraper with the right password never spends its
  budget, and an address whose budget is spent is answered 429 with no bcrypt at all.
- `FairChecks`: the checks that wait are served one address after the other (round
  robin, an address with nothing waiting first), at most `per_address` waiting from one
  address and `max_waiting` in all, so forty clients on one address hold one turn in
  the rotation, not forty: a scraper on another address waits for the check in
  progress, then its own. Credentials that passed before (vouched) go ahead of all of
  them and are never refused.

An address is an IPv4 address, or an IPv6 /64 (what one host or one customer of a
provider is usually given: counting single IPv6 addresses would let one host spend 2^64
budgets). The table of addresses is bounded (`max_addresses`): when it is full, the
addresses whose budget is whole are forgotten first, then the longest unseen.

Behind one NAT (or one proxy) every client shares one address, so one budget and one
turn: an attacker there spends the budget of the scraper beside it, which then gets 429
until one of its own checks is let through; a scraper that has passed once since start
is vouched for and never limited (docs/web-front.md, "Basic auth").
"""

from __future__ import annotations

import ipaddress
import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass


class AuthBusy(Exception):
    """Too many password checks are waiting: answered 503, not checked."""


class AuthLimited(Exception):
    """The source address has spent its budget of failed checks: answered 429, not
    checked; `retry_after` is when its next check is allowed, in seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"retry after {retry_after:.1f}s")
        self.retry_after = retry_after


# A scraper asks once per scrape interval and passes: it never spends its budget. Ten
# wrong passwords at once (a mistyped config and its retries), then one a second.
FAILURE_BURST = 10
FAILURES_PER_SECOND = 1.0
# Addresses remembered at once: 4,096 buckets of about 200 bytes (under 1 MiB).
MAX_ADDRESSES = 4096


def address_key(peer: str) -> str:
    """The budget's key of a peer address: IPv4 as is (IPv4-mapped IPv6 too), IPv6 by
    its /64; anything else (a Unix socket, a name) as given."""
    try:
        ip = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return peer
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


@dataclass
class _Bucket:
    tokens: float
    updated: float


class FailureBudget:
    """Per address, how many checks may fail: charged when asked, refunded on success."""

    def __init__(self, burst: int = FAILURE_BURST, per_second: float = FAILURES_PER_SECOND,
                 max_addresses: int = MAX_ADDRESSES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._burst = float(burst)
        self._rate = per_second
        self._max = max_addresses
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def _refilled(self, key: str, now: float) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._max:
                self._forget(now)
            bucket = self._buckets[key] = _Bucket(self._burst, now)
        else:
            self._buckets.move_to_end(key)
            bucket.tokens = min(self._burst,
                                bucket.tokens + (now - bucket.updated) * self._rate)
            bucket.updated = now
        return bucket

    def _forget(self, now: float) -> None:
        whole = [k for k, b in self._buckets.items()
                 if b.tokens + (now - b.updated) * self._rate >= self._burst]
        for k in whole:
            del self._buckets[k]
        while len(self._buckets) >= self._max:
            self._buckets.popitem(last=False)  # the longest unseen

    def charge(self, peer: str) -> None:
        """Take one check from the address's budget, or raise AuthLimited."""
        now = self._clock()
        with self._lock:
            bucket = self._refilled(address_key(peer), now)
            if bucket.tokens < 1.0:
                raise AuthLimited((1.0 - bucket.tokens) / self._rate)
            bucket.tokens -= 1.0

    def refund(self, peer: str) -> None:
        """The check passed: it was not a failure."""
        now = self._clock()
        with self._lock:
            bucket = self._refilled(address_key(peer), now)
            bucket.tokens = min(self._burst, bucket.tokens + 1.0)

    def __len__(self) -> int:
        return len(self._buckets)


# Password checks run on one thread (bcrypt releases the GIL: a flood of wrong passwords
# takes one core, and scrapes keep the others).
BCRYPT_THREADS = 1
MAX_WAITING_CHECKS = 64
# Two: one address's check in progress and one waiting are all it can have ahead of a
# newcomer (which takes the next turn).
MAX_WAITING_PER_ADDRESS = 2

_Job = tuple[Callable[[], bool], "futures.Future[bool]"]


class FairChecks:
    """The checks waiting for the bcrypt thread: vouched ones first (never refused), then
    one per address in turn."""

    def __init__(self, threads: int = BCRYPT_THREADS, max_waiting: int = MAX_WAITING_CHECKS,
                 per_address: int = MAX_WAITING_PER_ADDRESS) -> None:
        self._threads = threads
        self._max_waiting = max_waiting
        self._per_address = per_address
        self._cond = threading.Condition()
        self._vouched: deque[_Job] = deque()
        # address -> its waiting checks; the order of the keys is the rotation.
        self._by_address: OrderedDict[str, deque[_Job]] = OrderedDict()
        self._waiting = 0
        self._started = False
        self._names = itertools.count()

    def submit(self, check: Callable[[], bool], vouched: bool, peer: str | None = None
               ) -> futures.Future[bool]:
        """Queue a check; AuthBusy when `max_waiting` wait, or `per_address` from the
        address of `peer` (a check without one, from in-process callers, takes a turn of
        its own)."""
        future: futures.Future[bool] = futures.Future()
        with self._cond:
            if not self._started:
                for _ in range(self._threads):
                    threading.Thread(target=self._serve, daemon=True,
                                     name=f"http-bcrypt-{next(self._names)}").start()
                self._started = True
            if vouched:
                self._vouched.append((check, future))
            else:
                key = address_key(peer) if peer is not None else f"#{next(self._names)}"
                mine = self._by_address.get(key)
                if self._waiting >= self._max_waiting or (
                        mine is not None and len(mine) >= self._per_address):
                    raise AuthBusy
                if mine is None:
                    # A newcomer takes the next turn: ahead of the addresses that were
                    # served already (they go to the back after each check).
                    mine = self._by_address[key] = deque()
                    self._by_address.move_to_end(key, last=False)
                mine.append((check, future))
                self._waiting += 1
            self._cond.notify()
        return future

    def _next(self) -> _Job:
        with self._cond:
            while not self._vouched and not self._by_address:
                self._cond.wait()
            if self._vouched:
                return self._vouched.popleft()
            key, mine = next(iter(self._by_address.items()))
            job = mine.popleft()
            self._waiting -= 1
            del self._by_address[key]
            if mine:  # its next check waits for a full turn of the others
                self._by_address[key] = mine
            return job

    def _serve(self) -> None:
        while True:
            check, future = self._next()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(check())
            except BaseException as exc:  # handed to the waiting request
                future.set_exception(exc)
