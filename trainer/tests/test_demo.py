"""make train-demo's from-scratch training feeds each teacher reply with only
the tokens its sliding-window model can see; that must be exact: the logits
of a reply computed from its window equal those of the whole sequence."""

from __future__ import annotations

import torch

from a2farm_support.demo import windows


def test_windows_hold_each_reply_and_the_context_before_it() -> None:
    ids = list(range(30))
    weights = [0.0] * 10 + [1.0] * 3 + [0.0] * 12 + [1.0] * 5
    got = windows([(ids, weights)], context=4)
    assert got == [(ids[6:13], [0.0] * 4 + [1.0] * 3, 6), (ids[21:30], [0.0] * 4 + [1.0] * 5, 21)]
    assert windows([([1, 2], [0.0, 0.0])], context=4) == []


def test_a_window_gives_the_logits_of_the_whole_sequence(small_qwen3) -> None:
    window, layers = 4, 2
    model = small_qwen3(window, seed=1)
    ids = torch.randint(0, 50, (40,)).tolist()
    weights = [0.0] * 30 + [1.0] * 6 + [0.0] * 4
    with torch.no_grad():
        whole = model(input_ids=torch.tensor([ids])).logits[0]
        (piece, w, first), = windows([(ids, weights)], context=layers * window)
        part = model(input_ids=torch.tensor([piece]), position_ids=torch.arange(first, first + len(piece))[None]).logits[0]
        short = model(input_ids=torch.tensor([piece[2:]]), position_ids=torch.arange(first + 2, first + len(piece))[None]).logits[0]
    # The logits that predict the reply's ids: from the position before it.
    used = list(range(w.index(1.0) - 1, len(piece)))
    torch.testing.assert_close(part[used], whole[[first + i for i in used]], atol=1e-10, rtol=1e-10)
    # Two tokens less context, and the first of them changes: the check can
    # fail.
    assert (short[used[0] - 2] - whole[first + used[0]]).abs().max() > 1e-6
