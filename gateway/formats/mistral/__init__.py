"""Mistral, Devstral, Magistral: Mistral's own encoder renders, `[TOOL_CALLS]` are the calls."""
