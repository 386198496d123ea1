"""WebSocket mode on /v1/responses: one socket, many responses.

Other layers use: `connection` (the socket's loop), `request` (its frames as typed models),
`frames` (a socket's direct text writer) and `error_events`; `_lanes`, `_steer` and `_turn_state`
are the connection's own."""
