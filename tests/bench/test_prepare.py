"""`python -m bench.prepare` measures the routes' own builders: on its smallest history the three
ways a turn reaches its prompt (a resent history under its cache key, a WebSocket continuation,
the same history uncached) must give the same ids, or its figures compare different work."""

from __future__ import annotations

from bench.prepare import SETTINGS, SIZES, build_scenario, prepare_http, prepare_routed, prepare_ws, routed
from gateway.adapters.responses.turn import from_http


async def test_cached_continued_and_uncached_prompts_are_the_same_ids(qwen_format):
    scenario = build_scenario(qwen_format, SIZES[0])
    cached = await prepare_http(scenario, scenario.full_body)
    continued = await prepare_ws(scenario, scenario.ws_frame)
    uncached = await prepare_http(scenario, scenario.uncached_body)
    assert len(uncached) >= SIZES[0]
    assert list(cached) == list(continued) == list(uncached)
    # the cached body is the resent path's (recognised from its bytes), the other its full parse
    assert (await from_http(scenario.runtime, scenario.full_body, SETTINGS)).turn.request.recognised is not None
    assert (await from_http(scenario.runtime, scenario.uncached_body, SETTINGS)).turn.request.recognised is None


async def test_a_routed_turn_finds_its_sessions_last_prompt_held(qwen_format):
    """`--routing`'s turn: the prompt routed by prefix after its session's routed last turn, which
    its replica holds (what a live session's next turn finds), and by session."""
    scenario = build_scenario(qwen_format, SIZES[0])
    previous = scenario.previous.tokens
    by_prefix, by_session = routed(scenario, "prefix"), routed(scenario, "session")
    ids = await prepare_routed(by_prefix, scenario.full_body)
    assert list(ids) == list(await prepare_routed(by_session, scenario.full_body))
    stats = by_prefix.pool.router.stats
    assert stats.best_tokens == previous.prompt_len // 16 * 16  # a replica holds all of the last prompt's chunks
    assert by_session.pool.router.stats.decisions == {"session": 2}
