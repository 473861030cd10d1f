"""The kinds of prefix cache by name, and the kind a policy's flags ask for (§8).

A policy names its cache through two class attributes (docs/policies.md):
`caches_duplicate_blocks` (vLLM's cache) and `radix_eviction` (SGLang's radix
tree, which wins when both are set); any other policy gets the LRU cache.
A new kind is one module implementing `prefix_cache.PrefixCache` and one line
in `CACHE_KINDS`.
"""
from __future__ import annotations

from .lru_cache import LruCache
from .prefix_cache import PrefixCache
from .radix_cache import RadixCache
from .vllm_cache import VllmCache

__all__ = ["CACHE_KINDS", "cache_kind", "make_cache"]

CACHE_KINDS: dict[str, type[PrefixCache]] = {
    "lru": LruCache,
    "vllm": VllmCache,
    "radix": RadixCache,
}


def cache_kind(caches_duplicate_blocks: bool, radix_eviction: bool) -> str:
    """The kind of cache a policy's two flags name."""
    if radix_eviction:
        return "radix"
    return "vllm" if caches_duplicate_blocks else "lru"


def make_cache(kind: str, compact: bool = False) -> PrefixCache:
    """A new, empty cache of `kind` (a name of `CACHE_KINDS`); `compact` (a fleet's
    replicas) spends some time to take less memory (vLLM's index in narrower
    buckets, its queue's keys packed). A compact cache's index used to be copied into a table of the
    size it needs whenever its dict had grown: on the Mooncake trace over 64
    replicas that took 31% of the replay's CPU (0.688x without, median of 3
    pairs) for 12 MB of its 234 MB peak, since a dict whose keys come and go
    grows its table again within about 1,400 keys; so no index is copied."""
    return CACHE_KINDS[kind](compact)
