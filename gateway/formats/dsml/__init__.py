"""DeepSeek-V3.2, V4 and V4.1: DeepSeek's own encoders render, DSML invoke blocks are the calls.

Other layers use: `family` (the three families the registry lists); `_render` (the encoders) is
this package's own."""
