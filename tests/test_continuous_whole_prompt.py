"""`continuous`'s test of a whole prompt as one chunk (policies/continuous.py's
`_whole_prompt_left`): by hand, and against the two properties it stands for."""
from __future__ import annotations

import itertools

from scheduler_sim.policies.continuous import _whole_prompt_left
from scheduler_sim.requests.request import DECODE, Request


def request(prompt, resident=0, restore=0, high_water=0):
    req = Request("r", 0, 0, prompt, 3)
    req.resident, req.restore, req.high_water = resident, restore, high_water
    return req


def test_by_hand():
    """A fresh prompt of 10: 10; 4 of it written: 6; written whole: 0 (a decode);
    preempted after 12 rows of a prompt of 10 (restore 12, high water 12): 12;
    restoring only 8 of a prompt of 10 does not reach its end: 0; rows to restore
    past the prompt and the high water (resident 12 of restore 14): 0, a decode."""
    assert _whole_prompt_left(request(10)) == 10
    assert _whole_prompt_left(request(10, resident=4, high_water=4)) == 6
    assert _whole_prompt_left(request(10, resident=10, high_water=10)) == 0
    assert _whole_prompt_left(request(10, restore=12, high_water=12)) == 12
    assert _whole_prompt_left(request(10, restore=8, high_water=8)) == 0
    assert _whole_prompt_left(request(10, resident=12, restore=14, high_water=12)) == 0


def test_the_properties_it_stands_for():
    """On every small (prompt, resident, restore, high water): `phase_remaining` when
    `phase` is not DECODE and `resident + phase_remaining >= prompt_tokens`, else 0."""
    for prompt, resident, restore, high in itertools.product(range(1, 6), range(8),
                                                              range(8), range(8)):
        req = request(prompt, resident, restore, high)
        tokens = req.phase_remaining
        whole = req.phase != DECODE and resident + tokens >= prompt
        assert _whole_prompt_left(req) == (tokens if whole else 0)
