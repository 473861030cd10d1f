"""Counted blocks: the part of `BlockAllocator` that hands out the decode
cohort's new blocks by count, where nobody can see which ids they are.

The decode cohort (engine/fast/cohort.py) counts steady decoders instead of
writing their rows; their new blocks are counted too. A dispatch or a folded
stretch of members opens a number of blocks the cohort knows from its
residue groups alone (`take_counted(blocks)`): they leave the free pools
(in the order `grow` takes them), count as held and, under a policy that
reserves (`counted_credited`), as granted from the members' credits (every
member then holds one; vllm's hold none), and wait, as ids nobody owns
yet, in `_counted`. When a member leaves the cohort, settled, its table
takes the blocks its rows need from there (`give_counted`) and its credit, if
counted, is charged; so whenever anything reads a table, a credit or a request's
progress, they are what growing block by block would have left. Called
member by member, `grow` and `open_block` were 194,718 Python calls
replaying the Azure conversation trace under `continuous` (153,276 from
folds, 41,442 from counted dispatches); now the members cost one call each
when they leave, and a fold or dispatch one call: 6.2% fewer instructions
on the first 2,000 requests of that trace (callgrind, whole process, modules
compiled beforehand: 1.942e9 to 1.823e9), as many on the whole trace
(14.057e9 to 13.190e9, 0.938). (One call per residue group
instead, ids given at once, saved nothing: a fold opens blocks for about 6
members in about 6 groups. Nor did one call per fold for `vllm`'s written
decoders: 2.754e9 to 2.767e9 instructions, both compiling their modules.)

Which ids a member gets is not what step-by-step growth would have given.
Nothing can see it while the cohort exists: the engine keeps a cohort only
without prefix caching (keys live on blocks; `Evicted` records name them),
state callbacks (the report, Perfetto) and plugins (which
may read `table`); host memory's loads, a fleet's transfers (`pin`) and
vLLM's `most-blocks` rule read the tables of requests that are not members.
The audit counts the blocks in `_counted` as held. So ids stay ids (a
request's blocks are a list, the pool a stack): only the cohort's members'
new blocks are a count, until they leave. (Where nothing reads an id at
all, every block is a count: kv/block_counts.py.) Every block count, free, held,
draining, granted and credit is the same at every boundary as growing each
member block by block, except `step_growth`, which counted blocks are not
in: it says what this step's policy and dispatch took from the pool for the
snapshot and the blocked head's report, which read it before any member's
row opens a block.
"""
from __future__ import annotations

from ..records.errors import InvariantError

__all__ = ["CountedBlocks"]


class CountedBlocks:
    """`BlockAllocator.counted`, `take_counted` and `give_counted` (see the module
    docstring)."""

    @property
    def counted(self) -> int:
        """Blocks the decode cohort's members hold by count, in no table yet."""
        return len(self._counted)

    def _short_of(self, who: str, need: int, free: int) -> InvariantError:
        """The error of a take of `need` new blocks when `free` are free (a bug of
        whoever asked: `who`), with the pool's equation and its numbers. (Shared by
        both allocators' `grow` and `take_counted`.)"""
        return InvariantError(f"{who} needs {need} new blocks but free({free}) < {need}: "
                              f"held({self.held}) + draining({self.draining}) + "
                              f"free({free}) == num_blocks({self.num_blocks})")

    def _charge_counted(self, rid: str, need: int) -> None:
        """Charge the `need` counted blocks a leaving member takes to its credit,
        where the policy reserves (`counted_credited`; under vllm nothing is
        reserved). (Shared by both allocators' `give_counted`.)"""
        credit = self._credits.get(rid)
        if credit is None:
            raise InvariantError(f"request {rid!r} takes counted blocks without a credit")
        grown = self._grown[rid] + need
        if grown > credit:
            raise InvariantError(
                f"request {rid!r}: allocated({grown}) <= credit({credit}) is false")
        self._grown[rid] = grown

    def fits_counted(self, blocks: int) -> bool:
        """Whether `blocks` blocks are free (`blocks <= free`): what the decode cohort's
        next dispatch opens, asked before it starts. Speed: a call where the `free`
        property was read (not specialised by the 3.11 interpreter: about 1,200
        instructions, a call about half), once a counted boundary and once an
        admission's completion (benchmarks/README.md, "twelfth steps ... mil8")."""
        return blocks <= len(self._free) + self.num_blocks - self._fresh + len(self._cached_free)

    def take_counted(self, blocks: int) -> None:
        """Allocate `blocks` blocks to members of the decode cohort, by count: held,
        granted from their credits, written into their tables by `give_counted`."""
        if blocks <= 0:
            return
        if self.cache is not None:
            raise InvariantError("blocks are counted only without prefix caching")
        # (`self.free`, inlined: about 50,000 calls on the Azure conversation trace.)
        free = len(self._free) + self.num_blocks - self._fresh + len(self._cached_free)
        if blocks > free:
            raise self._short_of("the decode cohort", blocks, free)
        self._counted += self._take_new(blocks)  # (the order `grow` takes them in)
        if self.counted_credited:
            self.granted += blocks
        held = self.held = self.held + blocks
        if held > self.peak_held:
            self.peak_held = held

    def give_counted(self, rid: str, rows: int) -> None:
        """A member of the decode cohort leaves: its table takes the counted blocks
        that cover `rows` rows, charged to its credit."""
        table = self._tables.get(rid)
        if table is None:
            table = self._tables[rid] = []
        need = -(-rows // self.block_size) - len(table)
        if need <= 0:
            return
        counted = self._counted
        if need > len(counted):
            raise InvariantError(f"request {rid!r} needs {need} counted blocks: "
                                 f"counted({len(counted)}) >= {need} is false")
        if self.counted_credited:
            self._charge_counted(rid, need)
        table += counted[-need:]
        del counted[-need:]
