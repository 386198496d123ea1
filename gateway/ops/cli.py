"""`vllm-gateway` command line. Every gateway flag can also be set as GATEWAY_<FLAG> in the environment.

`serve` runs the gateway in front of running vLLM replicas; `launch` starts and supervises local
vLLM replicas itself (gateway/ops/_launch.py) and serves the gateway in front of them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from gateway.core.logs import configure_logging
from gateway.ops._flags import build_parser, settings_from_args
from gateway.ops._serve import run

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser(__doc__)
    args, vllm_args = parser.parse_known_args(argv)
    if vllm_args and args.command != "launch":
        parser.error(f"unrecognized arguments: {' '.join(vllm_args)}")
    configure_logging(args.log_format, args.log_level)
    os.environ["GATEWAY_LOG_FORMAT"] = args.log_format  # --workers processes log the same way
    if args.command == "launch":
        from gateway.ops._launch import launch

        sys.exit(launch(args, vllm_args))
    upstreams = args.upstream or args.env_upstreams
    if not upstreams:
        from gateway.ops._demo import serve_demo

        sys.exit(serve_demo(args))
    if not args.model:
        sys.exit("vllm-gateway serve: --model (or GATEWAY_MODEL) is required with --upstream")
    if args.context_length is not None:
        sys.exit("vllm-gateway serve: --context-length sizes the local demo vLLM; with --upstream the replicas' "
                 "own --max-model-len decides (or use `vllm-gateway launch --context-length`)")
    if args.workers < 1:
        sys.exit("vllm-gateway serve: --workers must be at least 1")
    run(settings_from_args(args, model=args.model, upstreams=upstreams), workers=args.workers)
