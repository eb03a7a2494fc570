"""The loss: a hand-computed weighted cross-entropy; packed, padded and
chunked forms of it agree in value and gradient."""

from __future__ import annotations

import math
import random

import numpy as np
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
            logits = model(input_ids=torch.tensor(s.input_ids[None], dtype=torch.long)).logits[0].double()
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


def test_packed_attention_without_position_ids_is_refused() -> None:
    """Without position ids the per-sequence attention cannot see where a
    packed row's sequences start; it refuses rather than attend across them."""
    from a2farm_trainer.attention import segments_attention

    q = torch.randn(1, 2, 6, 4)
    kv = torch.randn(1, 1, 6, 4)
    with pytest.raises(ValueError, match="position_ids"):
        segments_attention(torch.nn.Module(), q, kv, kv, None)
    out, _ = segments_attention(torch.nn.Module(), q, kv, kv, None, position_ids=torch.tensor([[0, 1, 2, 0, 1, 2]]))
    assert out.shape == (1, 6, 2, 4)


@pytest.mark.parametrize("head_trains", [False, True], ids=["frozen head: gradient in the forward", "trained head: checkpointed chunks"])
def test_chunked_loss_equals_naive_in_value_and_gradient(head_trains: bool) -> None:
    """Both ways of the chunked loss — a frozen output layer (LoRA) takes each
    chunk's gradient in the forward pass; a trained one recomputes its chunks
    in the backward — give the naive loss's value and gradients, also
    through a layer before them and a gradient scaled on the way back."""
    torch.manual_seed(0)
    vocab, hidden, n = 1000, 16, 300
    head = torch.nn.Linear(hidden, vocab, bias=False).requires_grad_(head_trains)
    below = torch.nn.Linear(hidden, hidden)
    x = torch.randn(1, n, hidden)
    targets = torch.randint(0, vocab, (1, n))
    scale = torch.rand(1, n) * (torch.rand(1, n) > 0.4)
    results = []
    for fn in (naive_weighted_ce, lambda *a: chunked_weighted_ce(*a, chunk=37)):
        head.zero_grad()
        below.zero_grad()
        loss = fn(below(x), head, targets, scale)
        (loss * 3.0).backward()
        results.append((loss.item(), below.weight.grad.clone(), head.weight.grad.clone() if head_trains else None))
    (l1, gb1, gw1), (l2, gb2, gw2) = results
    assert l1 == pytest.approx(l2, rel=1e-6)
    torch.testing.assert_close(gb1, gb2)
    if head_trains:
        torch.testing.assert_close(gw1, gw2)
    else:
        assert head.weight.grad is None


def test_step_normalisation_does_not_depend_on_micro_batching(lm) -> None:
    """Σ w·CE / labelled tokens of the whole step: one micro-batch or four
    give the same step loss."""
    seqs = fixture_sequences(lm.config.vocab_size)
    wrapper = WeightedLM(lm)
    one = step_loss(wrapper, seqs, "packed", 64).item()
    many = step_loss(wrapper, seqs, "packed", 15).item()
    assert one == pytest.approx(many, abs=1e-6)
    # The reference trainer's layout: a micro-batch per sequence.
    micro = packing.plan([len(s) for s in seqs], 64, "single", 7, 0)
    assert all(len(m) == 1 for m in micro) and sorted(m[0] for m in micro) == list(range(len(seqs)))
    assert step_loss(wrapper, seqs, "single", 64).item() == pytest.approx(one, abs=1e-6)


def test_an_epochs_gradient_normalises_each_step_by_its_own_labelled_tokens(lm) -> None:
    """The command's own train_step over one epoch whose last step holds fewer
    micro-batches than the others: the summed gradient is that of
    Σ_steps Σ_{tokens of the step} w·CE / N_step — each step, the short last
    one included, divided by its own labelled tokens (docs/TRAINING.md)."""
    from accelerate import Accelerator

    from a2farm_trainer.config import TrainConfig
    from a2farm_trainer.checkpoint import Position
    from a2farm_trainer.train import plan_steps, train_step

    seqs = fixture_sequences(lm.config.vocab_size) + fixture_sequences(lm.config.vocab_size, seed=2)[:3]
    cfg = TrainConfig(shards=[], out="", model="", token_budget=16, max_length=16, grad_accum=2, max_grad_norm=0.0,
                      epochs=1, seed=7)
    steps = [step for _, step in plan_steps(seqs, cfg, cfg.grad_accum, Position())]
    assert len(steps) > 1 and sum(1 for m in steps[-1] if m) < cfg.grad_accum, steps
    lm.zero_grad(set_to_none=True)  # the module's model: other tests leave gradients in it
    trainable = {n: p for n, p in lm.named_parameters() if p.requires_grad}
    start = {n: p.detach().clone() for n, p in trainable.items()}

    acc = Accelerator(cpu=True, gradient_accumulation_steps=cfg.grad_accum)
    wrapper = WeightedLM(lm, chunk=5)
    # Plain SGD at rate 1 moves each parameter by minus its gradient.
    optimizer = torch.optim.SGD(list(trainable.values()), lr=1.0)
    wrapper, optimizer = acc.prepare(wrapper, optimizer)
    moved = {n: torch.zeros_like(p) for n, p in start.items()}
    for step in steps:
        train_step(acc, wrapper, optimizer, cfg, seqs, step, pad=0)
        with torch.no_grad():
            for n, p in trainable.items():
                moved[n] += p - start[n]
                p.copy_(start[n])  # every step's gradient at the same point

    lm.zero_grad()
    total = torch.zeros((), dtype=torch.float64)
    for step in steps:
        members = [i for m in step for i in m]
        n_step = sum(seqs[i].labelled() for i in members)
        for i in members:
            q = seqs[i]
            logits = lm(input_ids=torch.tensor(q.input_ids[None], dtype=torch.long)).logits[0, :-1].double()
            ce = torch.nn.functional.cross_entropy(logits, torch.tensor(q.input_ids[1:], dtype=torch.long), reduction="none")
            total = total + (ce * torch.tensor(q.weights[1:], dtype=torch.float64)).sum() / n_step
    total.backward()
    for n, p in trainable.items():
        # The micro-batch's scales are float32: agreement to its rounding.
        torch.testing.assert_close(moved[n], -p.grad, atol=1e-6, rtol=1e-5, msg=n)
    lm.zero_grad()


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


def hand_importance_loss(model, seqs: list[Sequence], cap: float) -> torch.Tensor:
    """Σ w·min(π_θ/μ, cap)·CE / labelled tokens, the ratio taken without
    gradient and 1 where μ is unknown: the truncated importance weight,
    written out one token at a time."""
    total, labelled = torch.zeros((), dtype=torch.float64), 0
    for s in seqs:
        logp = torch.log_softmax(model(input_ids=torch.tensor(s.input_ids[None], dtype=torch.long)).logits[0].double(), -1)
        for t in range(1, len(s)):
            w = float(s.weights[t])
            if w == 0:
                continue
            lp = logp[t - 1, int(s.input_ids[t])]
            mu = None if s.behaviour is None else float(s.behaviour[t])
            ratio = 1.0 if mu is None or math.isnan(mu) else min(math.exp(lp.item() - mu), cap)
            total = total + w * ratio * -lp
            labelled += 1
    return total / labelled


def with_behaviour(model, seqs: list[Sequence]) -> list[Sequence]:
    """The fixture's sequences with acting log-probabilities around the
    model's own: some far below it (the ratio is cut at the cap), some above
    (a ratio below 1), some equal, some unknown — and one sequence with none
    at all, as a row the server returned none for."""
    out = []
    offsets = [-2.0, 0.5, float("nan"), 0.0, -0.3]
    for k, s in enumerate(seqs):
        if k == len(seqs) - 1:
            out.append(Sequence(s.input_ids, s.weights, "fixture"))
            continue
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor(s.input_ids[None], dtype=torch.long)).logits[0].double(), -1)
        mu = [float("nan")] + [logp[t - 1, int(s.input_ids[t])].item() + offsets[(t + k) % len(offsets)] for t in range(1, len(s))]
        out.append(Sequence(s.input_ids, s.weights, "fixture", behaviour=mu))
    return out


@pytest.mark.parametrize("mode,naive", [("packed", False), ("padded", False), ("packed", True)], ids=["packed", "padded", "naive"])
def test_truncated_importance_weights_equal_a_hand_computation(lm, mode: str, naive: bool) -> None:
    """--is-cap: each token's weight times min(π_θ/μ, c), in value and in
    gradient (no gradient through the ratio), packed, padded and naive; a
    cap no ratio reaches and μ = π_θ leave the plain loss."""
    cap = 2.0
    seqs = with_behaviour(lm, fixture_sequences(lm.config.vocab_size))
    lm.zero_grad()
    want = hand_importance_loss(lm, seqs, cap)
    want.backward()
    want_grads = grads(lm)
    lm.zero_grad()
    got = step_loss(WeightedLM(lm, chunk=5, naive=naive, is_cap=cap), seqs, mode, budget=64)
    got.backward()
    assert got.item() == pytest.approx(want.item(), abs=1e-6)
    assert want_grads.keys() == grads(lm).keys() and want_grads
    for name, g in grads(lm).items():
        torch.testing.assert_close(g, want_grads[name], atol=1e-6, rtol=1e-4, msg=name)
    plain = step_loss(WeightedLM(lm, chunk=5), seqs, mode, budget=64).item()
    assert got.item() != pytest.approx(plain, abs=1e-4)  # the weights did change the loss
    same = [Sequence(s.input_ids, s.weights, "fixture", behaviour=s.behaviour) for s in seqs]
    for s in same[:-1]:  # μ = π_θ: every ratio is 1
        with torch.no_grad():
            logp = torch.log_softmax(lm(input_ids=torch.tensor(s.input_ids[None], dtype=torch.long)).logits[0].double(), -1)
        s.behaviour = np.array([0.0] + [logp[t - 1, int(s.input_ids[t])].item() for t in range(1, len(s))], dtype=np.float32)
    at_one = step_loss(WeightedLM(lm, chunk=5, naive=naive, is_cap=cap), same, mode, budget=64).item()
    assert at_one == pytest.approx(plain, rel=1e-5)
