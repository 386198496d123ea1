"""What every layer shares; it imports nothing of the gateway.

Other layers use every module: `conversation` (the canonical conversation), `errors` (API-shaped
errors), `settings`, `sampling`, `ids`, `image` and `vision` (image inputs and their token counts),
`logs`, `tracing` (the one source of spans), `push` (how a layer hands the next what it has),
`service_tier` and `tenancy`."""
