"""Prometheus metrics of `corral serve --http ... --metrics HOST:PORT`.

Imported only when --metrics is given: the library and the stdio server never
load prometheus_client. Each server has a CollectorRegistry of its own (nothing
goes to the process-wide default one), served by prometheus_client's ASGI app on
a listener of its own, apart from the MCP endpoint: a scraper needs no tenant's
token, and a flood of MCP requests does not delay a scrape. The listener is
uvicorn's, with the MCP endpoint's guard (http_server.serve): prometheus_client's
own HTTP server gives every connection a thread and no deadline, so idle
connections to it, which need no token, ran the process out of files.

What is counted comes from corral.observe.Observer events (a call's end, a
worker's death, an approval), tallied here in plain dicts under one lock: a
labelled prometheus_client Histogram costs ~1.2 us an observation even with its
children cached (a lock per bucket value), ~3 us without, against ~0.4 us for
this tally, and a 4 KiB read through the pool takes some 100 us. The tally is
turned into metric families when scraped, as are the gauges, read then from
Pool.stats() and each tenant's sandboxes.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, make_asgi_app
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from corral.observe import Observer
from corral.tools.registry import TOOLS

# Call latency buckets, in seconds: a small read through a warm pool takes ~100 us,
# a call that times out 10 s (the default timeout_s).
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
           0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# The label of a call to a tool corral does not have: a caller's spelling would make
# one series per typo.
UNKNOWN_TOOL = "unknown"
QUOTA_EXCEEDED = "quota_exceeded"


class Tally(Observer):
    """Every count the endpoint serves, as plain numbers (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: dict[tuple[str, str], int] = {}  # (tool, code) -> calls
        self.latency: dict[str, list[int]] = {}  # tool -> calls per bucket, +Inf last
        self.seconds: dict[str, float] = {}  # tool -> seconds of every call together
        # signal -> workers. SIGSYS is there from the start: a series that first appears
        # at 1 has no increase() to Prometheus, so the first attempted escape of a
        # server's life would raise no alert (deployment.md's CorralSeccompKill).
        self.deaths: dict[str, int] = {"SIGSYS": 0}
        self.approvals: dict[str, int] = {}  # outcome -> approvals
        self.quota: dict[str, int] = {}  # tenant -> calls refused quota_exceeded

    def on_call(self, tool: str, code: str, seconds: float) -> None:
        self.call(tool, code, seconds, None)

    def call(self, tool: str, code: str, seconds: float, tenant: str | None) -> None:
        if tool not in TOOLS:
            tool = UNKNOWN_TOOL
        bucket = bisect.bisect_left(BUCKETS, seconds)  # the first bound >= seconds: le
        with self._lock:
            self.calls[tool, code] = self.calls.get((tool, code), 0) + 1
            counts = self.latency.get(tool)
            if counts is None:
                counts = self.latency[tool] = [0] * (len(BUCKETS) + 1)
            counts[bucket] += 1
            self.seconds[tool] = self.seconds.get(tool, 0.0) + seconds
            if code == QUOTA_EXCEEDED and tenant is not None:
                self.quota[tenant] = self.quota.get(tenant, 0) + 1

    def know(self, tenant: str) -> None:
        """A tenant's quota refusals start at 0, not at their first (as SIGSYS does)."""
        with self._lock:
            self.quota.setdefault(tenant, 0)

    def on_worker_death(self, signal: str) -> None:
        with self._lock:
            self.deaths[signal] = self.deaths.get(signal, 0) + 1

    def on_approval(self, outcome: str) -> None:
        with self._lock:
            self.approvals[outcome] = self.approvals.get(outcome, 0) + 1

    def families(self) -> Iterator[Metric]:
        with self._lock:  # a copy, so the families are built outside the lock
            calls, deaths = dict(self.calls), dict(self.deaths)
            approvals, quota = dict(self.approvals), dict(self.quota)
            latency = {tool: list(counts) for tool, counts in self.latency.items()}
            seconds = dict(self.seconds)
        yield _counter("corral_calls", "Tool calls answered, by tool and error code "
                       '("ok": success).', ("tool", "code"), calls)
        histogram = HistogramMetricFamily(
            "corral_call_duration_seconds", "Time from a call's start to its result, by "
            "tool (a supervised call's wait for approval included).", labels=("tool",))
        for tool, counts in sorted(latency.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*BUCKETS, float("inf")), counts, strict=True):
                cumulative += count
                buckets.append((floatToGoString(bound), cumulative))
            histogram.add_metric((tool,), buckets, seconds[tool])
        yield histogram
        yield _counter("corral_worker_deaths", "Workers that died of something the host did "
                       "not do, by signal (SIGSYS: an attempted system call the seccomp "
                       'profile forbids; "exit": exited on its own).', ("signal",), deaths)
        yield _counter("corral_quota_refusals", "Calls refused with quota_exceeded, by tenant.",
                       ("tenant",), quota)
        yield _counter("corral_approvals", "Approvals of supervised calls, by outcome "
                       "(asked, granted, denied, remembered).", ("outcome",), approvals)


def _counter(name: str, documentation: str, labels: tuple[str, ...],
             values: Mapping[Any, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(key if isinstance(key, tuple) else (key,), value)
    return family


class TenantObserver(Observer):
    """A tenant's sandboxes' observer: the tally, with the tenant's name for the
    counts that carry it (quota refusals)."""

    def __init__(self, tally: Tally, tenant: str) -> None:
        self.tally = tally
        self.tenant = tenant

    def on_call(self, tool: str, code: str, seconds: float) -> None:
        self.tally.call(tool, code, seconds, self.tenant)

    def on_worker_death(self, signal: str) -> None:
        self.tally.on_worker_death(signal)

    def on_approval(self, outcome: str) -> None:
        self.tally.on_approval(outcome)


class Gauges:
    """What is read when scraped: the pool's workers and each tenant's queue."""

    def __init__(self, stats: Callable[[], dict[str, int]],
                 queued: Callable[[], dict[str, int]]) -> None:
        self.stats = stats  # Pool.stats
        self.queued = queued  # tenant -> calls of its sandboxes waiting for a worker

    def families(self) -> Iterator[Metric]:
        stats = self.stats()
        yield GaugeMetricFamily("corral_workers_busy", "Workers running a call (or being "
                                "forked for one).", value=stats["busy_workers"])
        yield GaugeMetricFamily("corral_workers_idle", "Workers alive and idle.",
                                value=stats["idle_workers"])
        yield GaugeMetricFamily("corral_sandboxes", "Sandboxes open (one per MCP session "
                                "that has listed or called the tools).", value=stats["sandboxes"])
        queued = GaugeMetricFamily("corral_queued_calls", "Calls waiting for a worker, by "
                                   "tenant.", labels=("tenant",))
        for tenant, count in sorted(self.queued().items()):
            queued.add_metric((tenant,), count)
        yield queued


class Metrics:
    """One server's metrics: its registry, the tally its observers feed, and the
    ASGI app that serves them (at any path) on the listener http_server makes."""

    def __init__(self) -> None:
        self.tally = Tally()
        self.registry = CollectorRegistry()
        self.app = make_asgi_app(self.registry)

    def observer(self, tenant: str) -> Observer:
        self.tally.know(tenant)
        return TenantObserver(self.tally, tenant)

    def watch(self, stats: Callable[[], dict[str, int]],
              queued: Callable[[], dict[str, int]]) -> None:
        """Serve the tally and the gauges `stats` (Pool.stats) and `queued` (tenant ->
        calls waiting) give, once the pool they read exists."""
        self.registry.register(_Collector(self.tally, Gauges(stats, queued)))


class _Collector(Collector):
    """A custom collector: its collect() runs at each scrape."""

    def __init__(self, tally: Tally, gauges: Gauges) -> None:
        self.tally = tally
        self.gauges = gauges

    def collect(self) -> Iterator[Metric]:
        yield from self.tally.families()
        yield from self.gauges.families()
