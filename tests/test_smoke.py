"""A first end-to-end check that the conformance examples hold."""
from conftest import req, simulate


def test_one_block_request_finishes_in_one_dispatch():
    """P=4, N=1, B=4: one block, one prefill dispatch that emits the only output."""
    s = simulate([req("r1", 0, 4, 1)], block_size=4, num_blocks=1)
    r = s.req["r1"]
    assert (r.admitted_at, r.first_token_at, r.finished_at) == (0, 1, 1)
    assert r.status.label == "finished_length_capped"
    assert s.dispatches() == [(0, [("r1", "prefill", 4, True)])]
