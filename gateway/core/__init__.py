"""What every layer shares, importing nothing of the gateway: `conversation` (the canonical
conversation), `errors` (API-shaped errors), `settings`, `sampling`, `ids`, `image` and `vision`
(image inputs and their token counts), `logs`, `tracing` (the one source of spans), `push` (how a
layer hands the next what it has), `service_tier` and `tenancy`. All of them are public."""
