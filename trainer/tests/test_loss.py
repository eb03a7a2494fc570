"""The loss: a hand-computed weighted cross-entropy; packed, padded and
chunked forms of it agree in value and gradient."""

from __future__ import annotations

import math
import random

import pytest
import torch

from a2farm_trainer import packing
from a2farm_trainer.loss import chunked_weighted_ce, naive_weighted_ce
from a2farm_trainer.model import LoraSettings, WeightedLM, loss_of, with_adapter
from a2farm_trainer.shards import Sequence


def fixture_sequences(vocab: int, seed: int = 1) -> list[Sequence]:
    rng = random.Random(seed)
    out = []
    for n, first_trained in ((11, 4), (7, 2), (15, 9), (5, 1)):
        ids = [rng.randrange(vocab) for _ in range(n)]
        ws = [0.0] * first_trained + [round(rng.uniform(0.1, 3.0), 3) for _ in range(n - first_trained)]
        if first_trained + 1 < n:
            ws[first_trained + 1] = 0.0  # an untrained id between trained ones
        out.append(Sequence(ids, ws, "fixture"))
    return out


def hand_loss(model, seqs: list[Sequence]) -> float:
    """Σ w·CE / labelled tokens, one sequence at a time, from full logits and
    an explicit log-softmax: the definition, written out."""
    total, labelled = 0.0, 0
    with torch.no_grad():
        for s in seqs:
            logits = model(input_ids=torch.tensor([s.input_ids])).logits[0].double()
            for t in range(1, len(s)):
                w = s.weights[t]
                if w == 0:
                    continue
                row = logits[t - 1]
                lse = math.log(sum(math.exp(x) for x in (row - row.max()).tolist())) + row.max().item()
                total += w * (lse - row[s.input_ids[t]].item())
                labelled += 1
    return total / labelled


@pytest.fixture(scope="module", params=["sdpa", "a2farm_segments"])
def lm(request: pytest.FixtureRequest, tiny_model: str):
    """The tiny model under Transformers' SDPA (a block-diagonal mask for
    packed rows) and under the trainer's per-sequence attention."""
    from transformers import AutoModelForCausalLM

    from a2farm_trainer.train import attention

    # float64: the hand computation and the loss agree to rounding, far
    # inside the 1e-5 the test allows.
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float64, attn_implementation=attention(request.param))
    torch.manual_seed(5)
    # Weights far from the usual 0.02 initialisation, so that the context
    # (what attention sees) moves the loss by much more than the tolerances.
    with torch.no_grad():
        for name, p in base.named_parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.5)
    model = with_adapter(base, LoraSettings(), None, trainable=True)
    # Non-zero LoRA B so the adapter changes the logits the test sees.
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    return model


def step_loss(wrapper: WeightedLM, seqs: list[Sequence], mode: str, budget: int) -> torch.Tensor:
    micro = packing.plan([len(s) for s in seqs], budget, mode, seed=7, epoch=0)
    (step,) = packing.steps(micro, len(micro))
    scale = packing.scales(seqs, step, "tokens")
    return sum(loss_of(wrapper, packing.build(seqs, m, mode, scale, pad_id=0)) for m in step)


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}


def test_loss_equals_hand_computed_weighted_cross_entropy(lm) -> None:
    seqs = fixture_sequences(lm.config.vocab_size)
    want = hand_loss(lm, seqs)
    got = step_loss(WeightedLM(lm, chunk=5), seqs, "packed", budget=64).item()
    assert got == pytest.approx(want, abs=1e-5)
    assert got > 0


@pytest.mark.parametrize("budget", [15, 20, 64])
def test_packed_and_padded_batches_give_the_same_loss_and_gradients(lm, budget: int) -> None:
    seqs = fixture_sequences(lm.config.vocab_size)
    wrapper = WeightedLM(lm, chunk=7)
    results = {}
    for mode in ("packed", "padded"):
        lm.zero_grad()
        loss = step_loss(wrapper, seqs, mode, budget=max(budget, 60) if mode == "padded" else budget)
        loss.backward()
        results[mode] = (loss.item(), grads(lm))
    (lp, gp), (ld, gd) = results["packed"], results["padded"]
    assert lp == pytest.approx(ld, abs=1e-6)
    assert gp.keys() == gd.keys() and gp
    for name in gp:
        torch.testing.assert_close(gp[name], gd[name], atol=1e-6, rtol=1e-4, msg=name)


def test_packing_does_not_attend_across_sequences(lm) -> None:
    """A sequence's loss is the same alone and packed behind another: the
    position ids restart and nothing of the first leaks into the second."""
    seqs = fixture_sequences(lm.config.vocab_size)
    wrapper = WeightedLM(lm)
    other = Sequence([(t + 17) % lm.config.vocab_size for t in seqs[0].input_ids], [0.0] * len(seqs[0]), "x")
    both = [other, seqs[2]]
    scale = {0: 1.0, 1: 1.0}
    alone = loss_of(wrapper, packing.build([seqs[2]], [0], "packed", {0: 1.0}, 0)).item()
    behind = packing.build(both, [0, 1], "packed", scale, 0)  # seqs[2] after the other one
    assert behind.position_ids[0, len(other)].item() == 0
    assert loss_of(wrapper, behind).item() == pytest.approx(alone, abs=1e-4)


def test_chunked_loss_equals_naive_in_value_and_gradient() -> None:
    torch.manual_seed(0)
    vocab, hidden, n = 1000, 16, 300
    head = torch.nn.Linear(hidden, vocab, bias=False)
    h = torch.randn(1, n, hidden, requires_grad=True)
    targets = torch.randint(0, vocab, (1, n))
    scale = torch.rand(1, n) * (torch.rand(1, n) > 0.4)
    results = []
    for fn in (lambda: naive_weighted_ce(h, head, targets, scale), lambda: chunked_weighted_ce(h, head, targets, scale, chunk=37)):
        head.zero_grad()
        h.grad = None
        loss = fn()
        loss.backward()
        results.append((loss.item(), h.grad.clone(), head.weight.grad.clone()))
    (l1, gh1, gw1), (l2, gh2, gw2) = results
    assert l1 == pytest.approx(l2, rel=1e-6)
    torch.testing.assert_close(gh1, gh2)
    torch.testing.assert_close(gw1, gw2)


def test_step_normalisation_does_not_depend_on_micro_batching(lm) -> None:
    """Σ w·CE / labelled tokens of the whole step: one micro-batch or four
    give the same step loss."""
    seqs = fixture_sequences(lm.config.vocab_size)
    wrapper = WeightedLM(lm)
    one = step_loss(wrapper, seqs, "packed", 64).item()
    many = step_loss(wrapper, seqs, "packed", 15).item()
    assert one == pytest.approx(many, abs=1e-6)


def test_per_sequence_normalisation_is_the_mean_of_each_sequences_own_loss(lm) -> None:
    seqs = fixture_sequences(lm.config.vocab_size)
    wrapper = WeightedLM(lm)
    micro = packing.plan([len(s) for s in seqs], 64, "packed", 7, 0)
    (step,) = packing.steps(micro, len(micro))
    scale = packing.scales(seqs, step, "sequences")
    got = sum(loss_of(wrapper, packing.build(seqs, m, "packed", scale, 0)) for m in step).item()
    want = sum(hand_loss(lm, [s]) for s in seqs) / len(seqs)
    assert got == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("window", [4, None])
def test_per_sequence_attention_keeps_a_sliding_window(small_qwen3, window: int | None) -> None:
    """A model whose layers attend to a sliding window is trained as it is
    served: on a packed row, the trainer's per-sequence attention gives the
    logits Transformers' SDPA gives each sequence alone (window 4, sequences
    of 12 and 9 tokens; None: full attention, the same check)."""
    from a2farm_trainer.train import attention

    served = small_qwen3(window, "sdpa", seed=3)
    trained = small_qwen3(window, attention("a2farm_segments"), seed=3)
    unwindowed = small_qwen3(None, "sdpa", seed=3)
    a, b = torch.randint(0, 50, (12,)), torch.randint(0, 50, (9,))
    with torch.no_grad():
        want = torch.cat([served(input_ids=a[None]).logits[0], served(input_ids=b[None]).logits[0]])
        packed = trained(input_ids=torch.cat([a, b])[None],
                         position_ids=torch.cat([torch.arange(12), torch.arange(9)])[None]).logits[0]
        full = unwindowed(input_ids=a[None]).logits[0]
    torch.testing.assert_close(packed, want, atol=1e-9, rtol=1e-9)
    if window is not None:  # the window changes the logits past it: the check can fail
        assert (full[window:] - want[window:12]).abs().max() > 1e-3
