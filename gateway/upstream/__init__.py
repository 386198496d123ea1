"""Stock vLLM replicas: the pool, routing, the token streams and the fleet's control plane.

Other layers use: `pool`, `replica`, `router`, `routing`, `prefix_index`, `replica_load`, `health`,
`outlier`, `connection`, `stream`, `chunks`, `protocol`, `control`, `disaggregation` and `mcp` (remote
MCP servers). The `_`-named modules (the update barrier, discovery, KV events, the transport) are
the pool's own."""
