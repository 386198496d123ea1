"""The turn: prepared once, run once, committed once, for every API.

Other layers use: `exchange` (prepare and run a turn; the Writer protocol; the stores' one door),
`request` (the canonical `TurnRequest`), `turn` (one model call), `token_turn` (a token-in turn),
`session` (which exact tokens a turn continues, what it leaves behind), `conversations`, `runtime`,
`gate`, `steering`, `trace` and `partial_rollout`. The `_`-named modules (the output relay, stop
strings, the tool-call limit, spans, the tool loop) are the turn's own."""
