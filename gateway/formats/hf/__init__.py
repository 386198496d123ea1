"""HF chat-template models: the model's own Jinja template renders, its family's parser reads.

Other layers use: `format` (`load_hf_format`, the HF chat format), `parser` (the streaming parser
every template family builds on), `render` (rendering through a chat template without letting
content forge markup) and `constraints` (structured outputs for chat-template models); `_window`
(rendering only the new items of a continued conversation) is this package's own."""
