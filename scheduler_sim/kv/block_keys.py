"""Block keys (§8 rule 1): what identifies a full block's content, and the
interning table of a trace's hash ids.

A full block is identified by a key chained from its parent block's key
and its exact content: two blocks get the same key only if they and every
block before them have the same content. For token ids the key is
BLAKE2b-128 over both (vLLM offers SHA-256 for the same purpose), exact
unless BLAKE2b collides (about n^2 / 2^129 for n blocks, never observed).
For a trace that carries `block_hashes` (one id per `hash_block_size`
prompt tokens, themselves chained) the content is the hash ids up to the
one covering the block's last token, and that token's offset: each chain of
hash ids is interned as a small integer id (exact, no hash), shared by
everything whose keys can meet (see `_entries`). Anything else (a prompt
without ids or hashes, outputs without ids) gets content unique to the
request, so another request never matches it but the request itself does
after a preemption.

Keys are compared for equality only (a cache indexes blocks by them, see
`prefix_cache`); nothing here knows about blocks being free or held.
"""
from __future__ import annotations

import weakref
from array import array
from bisect import bisect_right
from itertools import compress, count
from operator import ne
# BLAKE2b from its own module, which is `hashlib.blake2b`: `hashlib` loads OpenSSL's
# library first, 11 million instructions and about 3 ms of every run's start, keys
# or not (benchmarks/README.md, "twenty-sixth steps", helper az28).
from _blake2 import blake2b

__all__ = ["BlockKeys", "OWN_KEY", "interning_table"]

_ROOT = bytes(16)  # the parent key of a request's first block

# The key of block i of content unique to the request at trace position
# `index`: `OWN_KEY % (index, i)`, bytes no other request can produce (and
# never equal to an integer hash-id key).
OWN_KEY = b"r%d:%d"


def _chain(parent: bytes, content: bytes) -> bytes:
    """The key of a block: BLAKE2b-128 over its parent's key (length-prefixed, so
    the input splits one way only) and its content's tagged encoding."""
    return blake2b(bytes((len(parent),)) + parent + content, digest_size=16).digest()


def _tokens(ids) -> bytes:
    """Token ids, one encoding per sequence: 8 bytes each, or their text if one
    does not fit in 64 bits."""
    try:
        return b"t" + array("q", ids).tobytes()
    except OverflowError:
        return b"T" + ascii(tuple(ids)).encode()


def _hash_id(value) -> bytes:
    """A trace's hash id (an integer or a string), tagged by its kind."""
    return b"i%d" % value if type(value) is int else b"s" + ascii(value).encode()


# Hash entries, interned: the chain of hash ids up to an entry (its parent
# entry and its own id) -> a small sequential id. Every `BlockKeys` and every
# prefix cache alive at once share one table (the one `_entries()` returns), so
# keys that can meet in a cache, or in a router comparing one request's keys
# with several caches, come from the same table; it lives as long as any of
# them does (a cache keeps the keys of requests long gone), and grows by one
# entry per distinct chain of hash ids met (8 bytes, or about 100 with a link).
_LINK = 1 << 32  # an int hash id and a parent id below this make one int link


class _Entries:
    """The interning table. An entry whose parent is the entry interned just
    before it (id - 1) and whose hash id is an int is held as that hash id in
    `chained[id]` alone; any other as None there, and its link (parent id, hash
    id) -> id in `links`. So a chain interned in one go (a request's new
    entries) is a slice of `chained`, read back as a whole (`_intern_ints`).
    Ids count up from 0 (`len`)."""

    __slots__ = ("links", "chained", "__weakref__")

    def __init__(self) -> None:
        self.links: dict = {}
        self.chained: list = []

    def __len__(self) -> int:
        return len(self.chained)


def _intern(table: _Entries, value, node: int) -> int:
    """The id of the entry with hash id `value` after entry `node` (-1: none),
    interned now if new."""
    chained = table.chained
    if type(value) is int:
        if node + 1 < len(chained) and chained[node + 1] == value:
            return node + 1  # (held in `chained`: the child of the entry before it)
        # (parent id, hash id) as one int when both are small ints, else as a
        # pair with the hash id's tagged bytes.
        link = (value << 32) | (node + 1) if node + 1 < _LINK else (node, _hash_id(value))
    else:
        link = (node, _hash_id(value))
    got = table.links.get(link)
    if got is None:
        got = len(chained)
        if got == node + 1 and type(value) is int:
            chained.append(value)
        else:
            table.links[link] = got
            chained.append(None)
    return got


def _intern_ints(table: _Entries, values: list, node: int, runs: list) -> None:
    """Intern the hash entries `values` (int ids all) after entry `node` (-1:
    none), as `_intern` one by one would, and add their ids to `runs` ([first
    id, count] per run of consecutive ids, the last one lengthened when they go
    on from it).

    Speed: a request's entries are a few runs of consecutive ids (a shared
    head's, an earlier turn's, its new ones), each a chain interned in one go,
    so a slice of `chained`: each run is found by one `_intern`, its length by
    comparing slices in C, and the new entries are appended as one slice (a
    child of a new entry is new, and held in `chained`). Was a dict look-up and
    a Python pass per entry: replaying the Mooncake trace under vllm, 276,469
    entries (182,458 new) in 12,031 first `ensure` calls, 2.8 runs each
    (benchmarks/README.md, "thirtieth steps", helper bk33)."""
    chained = table.chained
    if type(values) is not list:  # (compared with slices of `chained`)
        values = list(values)
    n = len(values)
    k = 0
    while k < n:
        known = len(chained)
        got = node + 1
        if got >= known or chained[got] != values[k]:  # (else held in `chained`,
            got = _intern(table, values[k], node)      # `_intern`'s first test: 0.999x)
        if len(chained) > known:  # new: so is every entry after it
            chained += values[k + 1:]
            length = n - k
        else:  # the entries after it: got + 1, ... while `chained` holds them so
            m = min(n - k, known - got) - 1
            held, asked = chained[got + 1:got + 1 + m], values[k + 1:k + 1 + m]
            length = 1 + (m if held == asked else
                          next(compress(count(), map(ne, held, asked))))
        if runs and runs[-1][0] + runs[-1][1] == got:
            runs[-1][1] += length
        else:
            runs.append([got, length])
        node = got + length - 1
        k += length


_INTS = {int}  # (the types of hash ids `_intern_ints` takes: ints only, not bool)


_current_entries = weakref.ref(_Entries())  # dead at once: the first user makes one


def _entries() -> _Entries:
    """The interning table shared by every key chain and cache alive now."""
    global _current_entries
    table = _current_entries()
    if table is None:
        table = _Entries()
        _current_entries = weakref.ref(table)
    return table


class BlockKeys:
    """The chain of keys of one request's full blocks, computed on demand.

    Token ids: bytes, `_chain(parent key, ids)`. A trace's hash ids: each hash
    entry is interned once, as a small id that stands for its whole chain of
    hash ids (the shared table maps (parent entry's id, the entry's hash id) to
    it, new ids counting up from 0, so two entries get the same id exactly
    when their chains are equal), and a block's key is the integer
    id * ceil(hash_block_size / block_size) + (offset of its last token in
    the entry) // block_size (one pair, one integer; never equal to a bytes
    key). The keys of an entry's blocks are consecutive, and keys in use are
    dense, so they spread evenly over a dict (keys id * hash_block_size +
    offset, all alike in their low bits, would crowd its slots). Content
    unique to the request: bytes `r`, its trace position and the block
    number, which no other request can produce; from `own_from` on every key
    is of that kind.

    Integer keys come first and run on consecutive integers (an entry's, and
    a request's new entries', interned one after the other), so they are kept
    as runs (first key, count), the other keys after them as a list (`tail`);
    `keys` makes them one list when asked.
    """

    __slots__ = ("index", "prompt_ids", "output_ids", "hashes", "prompt_tokens",
                 "block_size", "hash_block_size", "registered", "entries", "own_from",
                 "written", "found", "known", "ints", "run_pos", "run_key", "tail", "key_list")

    def __init__(self, index: int, prompt_tokens: int, block_size: int, hash_block_size: int,
                 prompt_ids=None, output_ids=None, hashes=None) -> None:
        self.index = index
        self.prompt_tokens = prompt_tokens
        self.block_size = block_size
        self.hash_block_size = hash_block_size
        self.prompt_ids = prompt_ids
        self.output_ids = output_ids
        self.hashes = hashes
        self.entries = _entries() if hashes is not None else None
        # The first block from which every key is of content unique to the
        # request (no token ids, and past the blocks the hash ids cover), if any.
        self.own_from = (-1 if prompt_ids is not None or output_ids is not None
                         else 0 if hashes is None
                         else min(prompt_tokens, len(hashes) * hash_block_size) // block_size)
        # The keys computed so far, the first `known` blocks': the leading `ints`
        # are integers kept as runs of consecutive keys (run i starts at block
        # `run_pos[i]` with key `run_key[i]` and lasts to the next run's start, or
        # to `ints`), the rest (keys of other kinds, never followed by an integer
        # key) in the list `tail`. As a list (`keys`) only when someone asks.
        self.known = 0
        self.ints = 0
        self.run_pos: list[int] = []
        self.run_key: list[int] = []
        self.tail: list[bytes] = []
        # `keys`, once made (then kept up to date); None: not made (vLLM's cache
        # reads it to key a decode's block of the request's own without `ensure`).
        self.key_list: list | None = None
        self.registered = 0  # leading blocks whose keys the cache already knows
        self.written = 0     # leading blocks handed to host memory's write-through
        # The last answer of a radix tree's `find`, kept by that tree to give again
        # while it holds (`radix_cache.RadixCache.find`); None: none kept.
        self.found = None

    def unwritten(self, limit: int | None = None) -> list:
        """The keys of registered blocks (of the first `limit`, if given) not yet
        handed to host memory's write-through; from now on they count as handed."""
        after = self.registered if limit is None or limit > self.registered else limit
        if after <= self.written:
            return []
        fresh = self.ensure(after)[self.written:after]
        self.written = after
        return fresh

    def _key(self, i: int, parent: bytes) -> bytes:
        """The key of block `i` (not in hash-id form) after a block keyed `parent`."""
        size = self.block_size
        start, end = i * size, (i + 1) * size
        p = self.prompt_tokens
        prompt, outputs = self.prompt_ids, self.output_ids
        if end <= p and prompt is not None:
            return _chain(parent, _tokens(prompt[start:end]))
        if outputs is not None and end - p <= len(outputs):
            if start >= p:
                return _chain(parent, _tokens(outputs[start - p:end - p]))
            if prompt is not None:
                return _chain(parent, _tokens(tuple(prompt[start:]) + tuple(outputs[:end - p])))
        return OWN_KEY % (self.index, i)

    @property
    def keys(self) -> list:
        """The keys computed so far as one list (position for position), made when
        first asked and kept up to date from then on (the radix tree, the
        router's hash holders and host memory read keys one by one; vLLM's cache
        reads the runs and `tail` instead, and never asks)."""
        keys = self.key_list
        if keys is None:
            keys = []
            ends = self.run_pos[1:] + [self.ints]
            for pos, key, end in zip(self.run_pos, self.run_key, ends):
                keys += range(key, key + end - pos)
            keys += self.tail
            self.key_list = keys
        return keys

    def key_at(self, i: int):
        """The key of block `i` (computed already: `i < known`)."""
        ints = self.ints
        if i >= ints:
            return self.tail[i - ints]
        pos = self.run_pos
        r = bisect_right(pos, i) - 1
        return self.run_key[r] + i - pos[r]

    def span(self, start: int, stop: int) -> range | list:
        """The keys of blocks `start` to `stop` (computed already): a `range` when
        they are one run of consecutive integer keys (the radix tree keeps a
        node's keys so), else a list."""
        ints = self.ints
        keys: list = []
        if start < ints and start < stop:
            pos, first = self.run_pos, self.run_key
            last = len(pos) - 1
            r = bisect_right(pos, start) - 1
            i = start
            while i < stop and i < ints:
                end = pos[r + 1] if r < last else ints
                if end > stop:
                    end = stop
                key = first[r] + i - pos[r]
                if i == start and end == stop:
                    return range(key, key + stop - start)
                keys += range(key, key + end - i)
                i = end
                r += 1
            start = i
        if start < stop:
            keys += self.tail[start - ints:stop - ints]
        return keys

    def ensure_new(self, count: int) -> int:
        """`ensure(count, False)`; then the first block of the hash entries it interned
        new (no cache holds their keys yet: a look-up stops there), or `count`. Speed:
        a first look-up walks no bucket of them, 0.998x the instructions of the first
        2,000 Mooncake requests under vllm ("thirty-first steps", helper lk35)."""
        made = len(self.entries) if self.entries is not None else -1
        self.ensure(count, False)
        keys = self.run_key  # (new entries come last: one run, unless it goes on)
        return (self.run_pos[-1] if made >= 0 and keys
                and keys[-1] >= made * -(-self.hash_block_size // self.block_size) else count)

    def ensure(self, count: int, listed: bool = True) -> list | None:
        """Compute the keys of the first `count` full blocks; return the key list
        (`keys`). With `listed` false, no list is made for them: they are kept as
        runs and `tail` only (and the list returned only if one was made before:
        else None).

        Speed: a trace's hash ids give runs of consecutive integer keys, which
        vLLM's cache reads as runs (first key, count) only; made as a list they
        were an int object per block (made, copied reversed into the freed run,
        freed at eviction), 5.6% of the instructions replaying the first 2,000
        Mooncake requests under vllm (helper pc8's callgrind)."""
        if listed and self.key_list is None:
            self.keys  # (made now, from what is known: kept up to date below)
        i = self.known
        if i >= count:
            return self.key_list
        tail = self.tail
        made = self.key_list
        if 0 <= self.own_from <= i:  # keys of its own (a decode filled a block)
            if count == i + 1:
                # One key (a decode filled one block): appended without a list
                # made for it. (Replaying the Mooncake trace under vllm, 150,432 of
                # the 192,543 calls that came here were this case; most are now
                # made by `VllmCache.register` itself, inline.)
                key = OWN_KEY % (self.index, i)
                tail.append(key)
                if made is not None:
                    made.append(key)
                self.known = count
                return made
            index = self.index
            fresh = [OWN_KEY % (index, k) for k in range(i, count)]
            tail += fresh
            if made is not None:
                made += fresh
            self.known = count
            return made
        size = self.block_size
        hashes = self.hashes
        if self.prompt_ids is None and hashes is not None:
            # The common case for imported traces: keys from the hash ids alone,
            # one interned id per hash entry.
            hbs = self.hash_block_size
            limit = min(self.prompt_tokens, len(hashes) * hbs)
            stop = min(count, limit // size)  # blocks whose tokens all have hash ids
            if i < stop:
                entries = self.entries
                slots = -(-hbs // size)  # keys per entry id at most
                entry, node = -1, -1  # the entry of block i - 1's last token, its id
                if i:  # resume after the keys computed before (integers all)
                    entry = (i * size - 1) // hbs
                    node = (self.run_key[-1] + i - 1 - self.run_pos[-1]) // slots
                run_pos, run_key = self.run_pos, self.run_key
                if hbs == slots * size:
                    # Entries of whole blocks (Mooncake's 512 tokens, blocks of 16):
                    # block b is offset b % slots of entry b // slots, so the keys
                    # are one run per run of consecutive entry ids. Was the loop
                    # below, one pass per entry: ensure took 11% of the Mooncake
                    # replay under vllm (sampled), this path 7.6%.
                    # [first id, count] per run of consecutive entry ids (a
                    # request's new entries, a conversation's earlier turns').
                    node_runs: list[list[int]] = []
                    values = hashes[entry + 1:(stop - 1) // slots + 1]
                    if set(map(type, values)) <= _INTS:
                        _intern_ints(entries, values, node, node_runs)
                    else:  # (a string hash id, or a bool: entry by entry)
                        for value in values:
                            got = _intern(entries, value, node)
                            if node_runs and got == node + 1:
                                node_runs[-1][1] += 1
                            else:
                                node_runs.append([got, 1])
                            node = got
                    # Each noted from its first entry's first block on (the blocks
                    # of entry `entry` after block i - 1 go on with the last run),
                    # as a new run unless it goes on from the last; `stop` ends
                    # the last. Speed: one pass over the entry runs where there
                    # were two: 0.996x the instructions of the first 2,000 Mooncake
                    # requests under vllm ("thirty-first steps", helper lk35).
                    pos = (entry + 1) * slots
                    for first, n in node_runs:
                        key = first * slots
                        if not run_pos or run_key[-1] + pos - run_pos[-1] != key:
                            run_pos.append(pos)
                            run_key.append(key)
                        pos += n * slots
                    self.ints = self.known = stop
                    if made is not None:
                        made += self.span(i, stop)
                    i = stop
                else:
                    ints = self.ints
                    while i < stop:
                        # Blocks whose last token falls in entry j: one id, and as
                        # keys the integers id * slots + (offset of their last token
                        # in the entry) // size, consecutive (one run; and dense, so
                        # that they spread evenly over a dict's table), each run
                        # lengthening the last one when it goes on from it (and the
                        # list, if made, extended).
                        j = ((i + 1) * size - 1) // hbs
                        while entry < j:
                            entry += 1
                            node = _intern(entries, hashes[entry], node)
                        end = min(stop, (j + 1) * hbs // size)
                        first = node * slots + ((i + 1) * size - 1 - j * hbs) // size
                        if not run_pos or run_key[-1] + ints - run_pos[-1] != first:
                            run_pos.append(ints)
                            run_key.append(first)
                        ints += end - i
                        if made is not None:
                            made += range(first, first + end - i)
                        i = end
                    self.ints = self.known = ints
            if i >= count:
                return made  # (all from the hash ids: no chained key, no parent made)
        parent = self.key_at(i - 1) if i else _ROOT
        if type(parent) is int:  # a hash-id key, chained from as bytes
            parent = b"h" + parent.to_bytes((parent.bit_length() + 7) // 8, "big")
        key = self._key
        while i < count:
            parent = key(i, parent)
            tail.append(parent)
            if made is not None:
                made.append(parent)
            i += 1
        self.known = count
        return made


def interning_table() -> _Entries:
    """The interning table shared by every key chain and cache alive now: a cache
    keeps it (and so the meaning of the keys it holds) alive as long as it lives."""
    return _entries()
