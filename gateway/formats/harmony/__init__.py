"""gpt-oss: harmony messages rendered and parsed with openai-harmony.

Other layers use: `format` (`load_harmony_format`); `_render`, `_parser` and `_constraints` are
this package's own."""
