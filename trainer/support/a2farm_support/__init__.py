"""What a2farm-train's tests, demo and benchmarks need beside the trainer,
kept out of the installable package (a GPU image needs none of it): the
stand-in OpenAI-compatible server (``serve``), the CPU demo of the whole
loop (``demo``) and the trainer's measurements (``bench``). Run them from
trainer/ with ``PYTHONPATH=src:support``, as the Makefile does."""
