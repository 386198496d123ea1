"""Exact tokens: the state a turn leaves, splicing, the prompt decision, restoring from ids."""
