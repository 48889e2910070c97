"""Prometheus metrics of the reader (``rollout serve-reader --metrics-address``).

How well its derived state answers, read from the live caches when scraped (nothing is
counted twice on the read path):

* ``rollout_replay_cache_answers_total{how}``: replays answered from a rendered copy
  unchanged (``unchanged``), extended by new records only (``extended``), or rendered
  from the first byte (``rebuilt``: a miss); the hit rate is (unchanged + extended) / all;
* ``rollout_recent_tail_reads_total{how}``: limited GetRecentMessages of files the cache did
  not hold, answered from the file's tail (``settled``), from the last such answer of the
  unchanged file (``repeated``) or not (``unsettled``: rebuilt whole);
* ``rollout_replay_cache_evictions_total`` and ``rollout_replay_cache_bytes`` (what the
  kept copies are charged);
* ``rollout_listing_activity_total{how}``: listing entries whose activity was still
  current (``current``: a hit) or read again (``refreshed``);
* ``rollout_listing_heads``: sessions whose session_meta the listing index holds.

Per-RPC counts, latencies and status codes (``grpc_server_*``) are serving.rpc_observer's.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from reader_service.listing_index import ListingIndex
from reader_service.replay_cache import ReplayCache


class _ReaderCollector(Collector):
    """Sums the counts of every live replay cache and listing index of the process."""

    def __init__(self) -> None:
        self.caches: weakref.WeakSet[ReplayCache] = weakref.WeakSet()
        self.indexes: weakref.WeakSet[ListingIndex] = weakref.WeakSet()

    def collect(self) -> Iterator[Metric]:
        answers = CounterMetricFamily(
            "rollout_replay_cache_answers", "Replays by how the replay cache answered them.", labels=["how"]
        )
        caches = list(self.caches)
        for how in ("unchanged", "extended", "rebuilt"):
            answers.add_metric([how], sum(cache.counts[how] for cache in caches))
        yield answers
        tail = CounterMetricFamily(
            "rollout_recent_tail_reads",
            "Limited GetRecentMessages of files the replay cache did not hold: answered from the"
            " file's tail (settled), from the last such answer of the unchanged file (repeated) or"
            " left to the whole-file rebuild (unsettled).",
            labels=["how"],
        )
        tail.add_metric(["settled"], sum(cache.counts["tail"] for cache in caches))
        tail.add_metric(["repeated"], sum(cache.counts["tail_repeated"] for cache in caches))
        tail.add_metric(["unsettled"], sum(cache.counts["tail_unsettled"] for cache in caches))
        yield tail
        yield CounterMetricFamily(
            "rollout_replay_cache_evictions",
            "Rendered replays dropped to stay within the cache's budget.",
            value=sum(cache.counts["evicted"] for cache in caches),
        )
        yield GaugeMetricFamily(
            "rollout_replay_cache_bytes",
            "Bytes the replay cache's kept copies are charged.",
            value=sum(cache.charged_bytes for cache in caches),
        )
        indexes = list(self.indexes)
        activity = CounterMetricFamily(
            "rollout_listing_activity",
            "Listed sessions whose activity was still current (a hit) or read again.",
            labels=["how"],
        )
        for how in ("current", "refreshed"):
            activity.add_metric([how], sum(index.counts[how] for index in indexes))
        yield activity
        yield GaugeMetricFamily(
            "rollout_listing_heads",
            "Sessions whose session_meta the listing index holds.",
            value=sum(index.heads_held for index in indexes),
        )
        listings = CounterMetricFamily(
            "rollout_sessions_folder_listings",
            "Listings of the sessions folder: in a call (a change nothing reported, a lookup that"
            " missed, a folder not followed) or in the background (checking what was reported).",
            labels=["where"],
        )
        for where in ("call", "background"):
            listings.add_metric([where], sum(index.folder.listings[where] for index in indexes))
        yield listings


_COLLECTOR = _ReaderCollector()
REGISTRY.register(_COLLECTOR)


def watch(cache: ReplayCache, index: ListingIndex) -> None:
    """Export the counts of a reader's replay cache and listing index (for as long as they live)."""
    _COLLECTOR.caches.add(cache)
    _COLLECTOR.indexes.add(index)
