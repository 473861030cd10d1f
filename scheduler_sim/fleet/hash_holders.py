"""Which replicas of a fleet may hold a block keyed from a trace's hash id.

`prefix-affinity` (routers.py) asks replicas' caches whether they hold a
request's keys, replica by replica. A replica can only hold a key that a
request it was sent produced: a block keyed from hash ids (`BlockKeys`: an
integer, the interned chain of hash ids up to the entry holding the block's
last token) is held only by replicas that were sent a request with that
chain, and so with that chain's last hash id. `HashHolders` keeps, for every
hash id routed so far, the replicas it was sent to (a bit mask): a superset
of the replicas holding any block keyed from it, since nothing is taken off
when a cache evicts. The router asks the caches only of replicas in that
set; the others would have answered no, so its answers are the same.

Kept as requests are routed, from their hash ids alone (no key is computed
or interned for it), one dictionary update per hash id: the Mooncake trace
has about 24 a request. Keys that are not integers (token ids' digests,
content of a request's own) give no hint: every replica may hold them.
"""
from __future__ import annotations

from ..kv.block_keys import BlockKeys

__all__ = ["HashHolders", "EVERY"]

EVERY = -1  # the mask with every replica's bit set (a Python int has as many as needed)


class HashHolders:
    """Hash id -> bit mask of the replicas that were sent a request with it.

    Memory: a trace's hash ids are often numbered from 0 (Mooncake's 182,790 ids
    are 0 to 182,789), so the masks of ids 0 to `len(dense)` - 1 are a list
    indexed by id, 8 bytes an id: as a dict they took 11 MB more at the peak of
    the Mooncake replay on 64 replicas (121 to 132 MB). The list grows only to
    cover an id at most a quarter past its end (plus 4,096); any other id (far
    beyond, negative, a string) is a key of `sparse`."""

    __slots__ = ("dense", "sparse", "_bits")

    def __init__(self) -> None:
        self.dense: list[int] = []
        self.sparse: dict = {}
        # 1 << i for replica i, one int object shared by every hash id sent only
        # to replica i (most of them: a conversation's later turns go where its
        # first went).
        self._bits: list[int] = []

    def sent(self, hashes, replica: int) -> None:
        """A request with hash ids `hashes` (None: none) was routed to `replica`."""
        if not hashes:
            return
        bits = self._bits
        while len(bits) <= replica:
            bits.append(1 << len(bits))
        bit = bits[replica]
        dense = self.dense
        size = len(dense)
        # (the list's length read once, not once a hash id: again only after it grew.
        # 27 hash ids an arrival on the first 2,000 Mooncake requests; on 64 replicas
        # 7.1525e9 -> 7.1379e9 instructions, 0.9980x, callgrind)
        for value in hashes:
            if type(value) is int and 0 <= value < size:
                mask = dense[value]
                if not mask & bit:
                    dense[value] = mask | bit
            elif type(value) is int and size <= value <= size + (size >> 2) + 4096:
                self._grow(value)
                size = len(dense)
                dense[value] |= bit
            else:
                self._note_sparse(value, bit)

    def _note_sparse(self, value, bit: int) -> None:
        sparse = self.sparse
        mask = sparse.get(value)
        if mask is None:
            sparse[value] = bit
        elif not mask & bit:
            sparse[value] = mask | bit

    def _grow(self, value: int) -> None:
        """Make `dense` cover ids up to `value`, and a quarter more; the masks of ids
        it now covers move there from `sparse`."""
        dense = self.dense
        old = len(dense)
        size = max(value + 1, old + (old >> 2))
        dense.extend([0] * (size - old))
        sparse = self.sparse
        if sparse:
            for moved in [v for v in sparse if type(v) is int and old <= v < size]:
                dense[moved] = sparse.pop(moved)

    def mask(self, value) -> int:
        """The replicas hash id `value` was sent to."""
        if type(value) is int and 0 <= value < len(self.dense):
            return self.dense[value]
        return self.sparse.get(value, 0)

    def deepest(self, hashes) -> int:
        """The replicas sent the last of `hashes` (a request's hash ids, None: none)
        that any replica was sent; 0 if none was. A conversation's earlier turns
        carried its hash ids up to there, and were sent where its history is
        likely cached: the replicas to look up first (`PrefixAffinity.longest_hit`)."""
        if not hashes:
            return 0
        dense = self.dense
        size = len(dense)
        sparse = self.sparse
        for value in reversed(hashes):
            mask = (dense[value] if type(value) is int and 0 <= value < size
                    else sparse.get(value, 0))
            if mask:
                return mask
        return 0

    def may_hold(self, keys: BlockKeys, block: int) -> int:
        """The mask of the replicas that may hold the key of `block` (already computed
        in `keys`): those sent the hash id of the entry its last token is in, if
        the key is one made from hash ids; else every replica (`EVERY`)."""
        if block >= keys.ints:  # (a key of another kind: the integer keys lead)
            return EVERY
        value = keys.hashes[((block + 1) * keys.block_size - 1) // keys.hash_block_size]
        if type(value) is int and 0 <= value < len(self.dense):
            return self.dense[value]
        return self.sparse.get(value, 0)
