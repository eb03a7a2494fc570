"""a2farm's trainer: advantage-weighted maximum likelihood on a2farm's shards.

Reads the learner's (and replay's) shards exactly — token shards id for id,
message shards through the model's chat template — and trains a LoRA adapter
that vLLM serves, on one CPU process, one GPU or many under Accelerate
(DeepSpeed ZeRO-3, FSDP). The command is ``a2farm-train`` (``python -m
a2farm_trainer``).
"""

__version__ = "0.1.0"
