"""The policy model, its LoRA adapter and the loss module the engines wrap.

The adapter is what vLLM serves: ``adapter_config.json`` and
``adapter_model.safetensors``, plain LoRA (no DoRA, no ``modules_to_save``)
with a rank vLLM accepts; the server needs ``--max-lora-rank`` ≥ r.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .errors import InputError
from .loss import DEFAULT_CHUNK, chunked_weighted_ce, naive_weighted_ce, token_ce
from .packing import MicroBatch

# LoRA ranks vLLM serves (vllm.config.LoRAConfig.max_lora_rank's choices).
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class LoraSettings:
    r: int = 16
    alpha: int = 16
    dropout: float = 0.0
    targets: tuple[str, ...] = DEFAULT_TARGETS


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise InputError(f"tokenizer {path}: cannot be loaded ({str(e).splitlines()[0]})") from None


def load_base(path: str, dtype: torch.dtype, attn: str | None) -> Any:
    from transformers import AutoModelForCausalLM

    if not os.path.exists(path) and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise InputError(f"--model {path}: no such folder (and HF_HUB_OFFLINE=1)")
    kwargs: dict[str, Any] = {"dtype": dtype}
    if attn:
        kwargs["attn_implementation"] = attn
    try:
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as e:
        raise InputError(f"--model {path}: cannot be loaded ({str(e).splitlines()[0]})") from None


def check_adapter_folder(path: str) -> dict[str, Any]:
    """An adapter folder as vLLM loads it; returns its config."""
    cfg_path = os.path.join(path, "adapter_config.json")
    if not os.path.isfile(cfg_path):
        raise InputError(f"--init-adapter {path}: no adapter_config.json (not a PEFT adapter folder)")
    if not os.path.isfile(os.path.join(path, "adapter_model.safetensors")):
        raise InputError(f"--init-adapter {path}: no adapter_model.safetensors")
    with open(cfg_path, encoding="utf-8") as f:
        cfg: dict[str, Any] = json.load(f)
    return cfg


def with_adapter(base: Any, lora: LoraSettings, init_adapter: str | None, trainable: bool) -> Any:
    """The base model with a LoRA adapter: a new one, or init_adapter's
    weights (its own rank and targets) to train further."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if init_adapter:
        cfg = check_adapter_folder(init_adapter)
        if cfg.get("use_dora") or cfg.get("modules_to_save"):
            raise InputError(f"--init-adapter {init_adapter}: DoRA or modules_to_save adapters cannot be served by vLLM")
        return PeftModel.from_pretrained(base, init_adapter, is_trainable=trainable)
    if lora.r not in VLLM_RANKS:
        raise InputError(f"--lora-r {lora.r}: vLLM serves ranks {', '.join(map(str, VLLM_RANKS))}")
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=list(lora.targets),
                        bias="none", task_type="CAUSAL_LM")
    try:
        return get_peft_model(base, config)
    except ValueError as e:
        raise InputError(f"--lora-targets {','.join(lora.targets)}: {str(e).splitlines()[0]}") from None


class WeightedLM(nn.Module):
    """The model with the advantage-weighted loss as its forward: engines
    (DDP, FSDP, DeepSpeed) wrap this module, so gradient synchronisation and
    parameter gathering see one forward per micro-batch."""

    def __init__(self, model: Any, chunk: int = DEFAULT_CHUNK, naive: bool = False, is_cap: float | None = None) -> None:
        super().__init__()
        self.model = model
        self.chunk = chunk
        self.naive = naive
        self.is_cap = is_cap  # truncated importance weights' cap (None: off)
        # FSDP's transformer wrap policy looks for the decoder layer class here.
        self._no_split_modules = getattr(self.causal_lm(), "_no_split_modules", None)

    def causal_lm(self) -> Any:
        m = self.model
        return m.get_base_model() if hasattr(m, "get_base_model") else m

    def hidden(self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        lm = self.causal_lm()
        out = lm.get_decoder()(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask, use_cache=False)
        return out.last_hidden_state

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                target_scale: torch.Tensor, target_behaviour: torch.Tensor | None = None) -> torch.Tensor:  # type: ignore[override]
        """Σ scale·CE of one micro-batch (tensors as MicroBatch holds them),
        each scale times its truncated importance weight with is_cap."""
        h = self.hidden(input_ids, position_ids, attention_mask)
        head = self.causal_lm().get_output_embeddings()
        targets = _targets(input_ids)
        if self.naive:
            return naive_weighted_ce(h, head, targets, target_scale, target_behaviour, self.is_cap)
        return chunked_weighted_ce(h, head, targets, target_scale, self.chunk, target_behaviour, self.is_cap)

    @torch.no_grad()
    def target_ce(self, mb: MicroBatch) -> torch.Tensor:
        """Cross-entropy of every position whose weight is not 0, in order."""
        h = self.hidden(mb.input_ids, mb.position_ids, mb.attention_mask)
        head = self.causal_lm().get_output_embeddings()
        return token_ce(h, head, _targets(mb.input_ids), mb.target_weights != 0, self.chunk)


def loss_of(module: nn.Module, mb: MicroBatch) -> torch.Tensor:
    """Calls a (possibly engine-wrapped) WeightedLM on a micro-batch."""
    return module(input_ids=mb.input_ids, position_ids=mb.position_ids, attention_mask=mb.attention_mask,
                  target_scale=mb.target_scale, target_behaviour=mb.target_behaviour)


def _targets(input_ids: torch.Tensor) -> torch.Tensor:
    t = torch.zeros_like(input_ids)
    t[:, :-1] = input_ids[:, 1:]
    return t


def to_device(mb: MicroBatch, device: torch.device) -> MicroBatch:
    return MicroBatch(
        mb.input_ids.to(device), mb.position_ids.to(device),
        mb.attention_mask.to(device) if mb.attention_mask is not None else None,
        mb.target_weights.to(device), mb.target_scale.to(device), mb.sequence_index.to(device),
        mb.tokens_trained, mb.tokens_computed, mb.labelled,
        mb.target_behaviour.to(device) if mb.target_behaviour is not None else None,
    )
