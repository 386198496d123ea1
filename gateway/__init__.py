"""vllm-agent-gateway: a gateway in front of stock vLLM for coding agents and RL training.

The gateway uses transformers for tokenizers and chat templates only, never a model: that
PyTorch is not installed is expected, and transformers' advice saying so at import (a plain
line on stderr, before logging is configured) would break `--log-format json`'s one JSON
object per line. A user who sets the variable keeps their value.
"""

import os

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
