"""The trainer's exit-code contract, the same as the a2farm binary's.

0 done, 1 the work failed, 2 usage or bad input, 130 interrupted (a
checkpoint was saved and ``--resume`` continues from it).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class InputError(Exception):
    """Bad input: a missing or mismatching manifest, a malformed shard, a bad
    flag. The command prints the message as one line and exits 2."""


class Interrupted(Exception):
    """Ctrl-C (SIGINT or SIGTERM) stopped training after a checkpoint was
    written; the command exits 130."""

    def __init__(self, checkpoint: str) -> None:
        super().__init__(f"interrupted: checkpoint saved in {checkpoint}; pass --resume to continue")
        self.checkpoint = checkpoint
