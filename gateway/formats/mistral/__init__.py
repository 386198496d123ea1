"""Mistral, Devstral, Magistral: Mistral's own encoder renders, `[TOOL_CALLS]` are the calls.

Other layers use: `format` (`load_mistral_format`, `is_mistral_dir`); `_parser` is this package's own."""
