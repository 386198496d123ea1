"""Exact tokens: the state a turn leaves, splicing, the prompt decision, restoring from ids."""

from gateway.tokenfix import locality as _locality  # noqa: F401  (installs the HF template probe)
