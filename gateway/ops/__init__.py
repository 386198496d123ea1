"""Running the gateway: the command line and what it starts.

Other layers use: `cli` (the `vllm-gateway` command, `python -m gateway`), `vllm_process` (a local
stock vLLM as a child process), `tiny_models` and `qwen_tokenizer` (the offline demo model and
tokenizer); `build_tiny_model` is a script run by its path. The `_`-named modules (flags, serve,
launch, demo, supervisor, workers, the fixture cache, malloc) are the commands' own."""
