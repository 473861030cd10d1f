"""The full check of vLLM's prefix cache (`vllm_cache.VllmCache.audit`): its
queue's runs and members, the index, the duplicates and the blocks left
unindexed, for tests and an engine built with `audit=True`."""
from __future__ import annotations

from ..records.errors import InvariantError

__all__ = ["audit_vllm"]


def audit_vllm(cache, tables, carried, orphans) -> None:
    """The runs hold the queue; every keyed block (leading blocks of the
    tables, carried, pinned, queued) has one key (or, draining or queued, none:
    an ended request's own content, counted by nobody's key); the index, the duplicates
    and the blocks `register` left unindexed (each of a request that holds
    them, from a block past its last integer key on) name exactly those
    blocks; raises InvariantError."""
    try:
        in_runs, run_keys = cache.queue_items()
        cache.free_blocks.check(in_runs, run_keys)
    except ValueError as e:
        raise InvariantError(str(e)) from None
    key_of = _keys(cache, tables, carried, orphans)
    duplicates = sum(map(len, cache.others.values()))
    unindexed = 0
    for rid, (table, start) in cache.unindexed.items():
        keys = cache.request_keys.get(rid)
        if keys is None or tables.get(rid) is not table or not 0 <= keys.own_from <= start:
            raise InvariantError(f"request {rid!r} has blocks left unindexed but not its "
                                 "table, or keys not of its own")
        unindexed += keys.registered - start
    if len(key_of) != len(cache.index) + duplicates + unindexed:
        raise InvariantError(
            f"keyed blocks({len(key_of)}) == indexed blocks, duplicates and unindexed "
            f"({len(cache.index) + duplicates + unindexed}) is false")
    cache._check_index(key_of)
    for key, blocks in cache.others.items():
        if key not in cache.index or any(key_of.get(b) != key for b in blocks):
            raise InvariantError(f"cache duplicates and block keys disagree on key {key!r}")


def _keys(cache, tables, carried, orphans) -> dict:
    """The key of every keyed block, gathered from the tables' leading blocks,
    the drain queue, the pinned orphans and the queue, each block with one key
    wherever it is named."""
    key_of: dict = {}

    def note(block, key, where):
        if key is None:  # (an ended request's own block, never keyed: `VllmCache.release`)
            if where != "free" and where != "draining":
                raise InvariantError(f"block {block} has no key ({where})")
            if block in key_of:
                raise InvariantError(f"block {block} has a key and none ({where})")
            return
        if key_of.setdefault(block, key) != key:
            raise InvariantError(f"block {block} has two keys ({where})")

    request_keys = cache.request_keys
    for rid, run in request_keys.items():
        if run.known < run.registered:  # (keys of blocks left unindexed: made now)
            run.ensure(run.registered, False)
        table = tables.get(rid)
        if table is None or not run.registered <= min(len(table), len(run.keys)):
            raise InvariantError(f"request {rid!r}: registered({run.registered}) <= "
                                 f"its blocks and keys is false")
        for block, key in zip(table, run.keys[:run.registered]):
            note(block, key, f"in the table of {rid!r}")
    for rid, table in tables.items():
        run = request_keys.get(rid)
        if any(b in key_of for b in table[run.registered if run is not None else 0:]):
            raise InvariantError(f"request {rid!r} holds a keyed block past its keyed "
                                 "leading blocks")
    for block, key in carried:
        note(block, key, "draining")
    if not cache.orphan_keys.keys() <= orphans:
        raise InvariantError("a pinned orphan's key outlived the orphan")
    for block, key in cache.orphan_keys.items():
        note(block, key, "pinned")
    for block, key in zip(*cache.queue_items()):
        note(block, key, "free")  # (no key, None: `free_blocks.check` saw it `loose`)
    return key_of
