"""python -m a2farm_trainer: the a2farm-train command."""

from .cli import main

main()
