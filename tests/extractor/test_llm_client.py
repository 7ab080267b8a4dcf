"""The chat-completions client against a scripted server on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from shared.errors import InvalidModelOutput, ProviderError, ProviderUnavailable
from shared.llm.client import LLMMetrics, OpenAIChatModel
from shared.llm.jobs import LLMExtractor
from shared.llm.schemas import EpisodeSummary, FactList
from tests.extractor.scripted_llm import Reply, ScriptedLLM

GOOD = {
    "title": "Checked weather for Silver Spring",
    "summary": "Tim asked for the weather.",
    "key_points": ["It was sunny"],
    "outcome": "resolved",
    "topics": ["weather"],
}


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def client(
    llm: ScriptedLLM, registry: CollectorRegistry | None = None, **kw: float | str
) -> OpenAIChatModel:
    return OpenAIChatModel(
        base_url=llm.base_url,
        model="scripted-1",
        api_key="k-123",
        metrics=LLMMetrics(registry) if registry else None,
        backoff_base_s=0.01,
        **kw,  # type: ignore[arg-type]
    )


async def ask(c: OpenAIChatModel) -> EpisodeSummary:
    return await c.complete_json(system="s", user="u", schema=EpisodeSummary, purpose="summary")


async def test_valid_json_is_returned_and_tokens_are_counted(llm: ScriptedLLM) -> None:
    registry = CollectorRegistry()
    llm.push(Reply(GOOD, usage=(120, 30)))
    c = client(llm, registry)
    try:
        summary = await ask(c)
    finally:
        await c.aclose()
    assert summary.title == GOOD["title"] and summary.outcome == "resolved"
    body = llm.requests[0]["body"]
    assert body["model"] == "scripted-1"
    assert body["response_format"] == {"type": "json_object"}
    assert llm.requests[0]["auth"] == "Bearer k-123"
    assert c.usage.total_tokens == 150 and c.usage.requests == 1
    got = registry.get_sample_value(
        "engram_llm_tokens_total", {"purpose": "summary", "kind": "prompt"}
    )
    assert got == 120


@pytest.mark.parametrize("how", ["json_object", "json_schema"])
async def test_the_schema_is_sent_for_constrained_decoding(llm: ScriptedLLM, how: str) -> None:
    llm.push(Reply({"facts": []}))
    c = client(llm, max_tokens=700, json_schema=how)
    try:
        await c.complete_json(system="s", user="u", schema=FactList, purpose="facts")
    finally:
        await c.aclose()
    body = llm.requests[0]["body"]
    fmt = body["response_format"]
    schema = fmt["schema"] if how == "json_object" else fmt["json_schema"]["schema"]
    assert fmt["type"] == how
    if how == "json_schema":
        assert fmt["json_schema"]["name"] == "FactList"
    assert schema == FactList.model_json_schema()
    # what a grammar needs: the fact's fields, its enums, a bound on the list
    fact = schema["$defs"]["FactCandidate"]
    assert fact["required"] == ["subject", "content"]
    assert "person" in fact["properties"]["category"]["enum"]
    assert schema["properties"]["facts"]["maxItems"] == 10
    assert body["max_tokens"] == 700


def test_the_settings_choose_the_format() -> None:
    from shared.llm.settings import LLMSettings

    s = LLMSettings(llm_base_url="http://x/v1", llm_model="m", llm_json_schema="json_object")
    c = OpenAIChatModel.from_settings(s)
    assert c._json_schema == "json_object" and c._max_tokens is None
    with pytest.raises(ValueError, match="llm_json_schema"):
        LLMSettings(llm_json_schema="grammar")  # type: ignore[arg-type]


async def test_json_in_a_code_fence_is_accepted(llm: ScriptedLLM) -> None:
    import json

    llm.push(Reply("```json\n" + json.dumps(GOOD) + "\n```"))
    c = client(llm)
    try:
        assert (await ask(c)).topics == ["weather"]
    finally:
        await c.aclose()


async def test_invalid_output_is_asked_again_with_the_error(llm: ScriptedLLM) -> None:
    llm.push(
        Reply("Sure! Here is a summary: it went well."),
        Reply({"title": "", "summary": "x"}),
        Reply(GOOD),
    )
    c = client(llm, invalid_retries=2)
    try:
        summary = await ask(c)
    finally:
        await c.aclose()
    assert summary.title == GOOD["title"]
    assert len(llm.requests) == 3
    retry = llm.requests[1]["body"]["messages"]
    assert retry[-2]["role"] == "assistant" and "Here is a summary" in retry[-2]["content"]
    assert "not valid" in retry[-1]["content"]
    assert "title" in llm.requests[2]["body"]["messages"][-1]["content"]


async def test_output_that_stays_invalid_raises_invalid_model_output(llm: ScriptedLLM) -> None:
    llm.push(*[Reply("not json")] * 3)
    c = client(llm, invalid_retries=2)
    try:
        with pytest.raises(InvalidModelOutput, match="3 times"):
            await ask(c)
    finally:
        await c.aclose()
    assert len(llm.requests) == 3


async def test_a_timeout_is_retried(llm: ScriptedLLM) -> None:
    llm.push(Reply(GOOD, delay=1.5), Reply(GOOD))
    c = client(llm, timeout_s=0.5, max_retries=2)
    try:
        assert (await ask(c)).title == GOOD["title"]
    finally:
        await c.aclose()
    assert len(llm.requests) == 2


async def test_timeouts_every_time_raise_provider_unavailable(llm: ScriptedLLM) -> None:
    llm.push(*[Reply(GOOD, delay=1.0)] * 3)
    c = client(llm, timeout_s=0.3, max_retries=2)
    try:
        with pytest.raises(ProviderUnavailable, match="3 attempt"):
            await ask(c)
    finally:
        await c.aclose()


async def test_429_and_5xx_are_retried_then_succeed(llm: ScriptedLLM) -> None:
    llm.push(
        Reply(status=429, raw="{}", headers={"retry-after": "0"}),
        Reply(status=503, raw="{}"),
        Reply(GOOD),
    )
    c = client(llm, max_retries=3)
    try:
        assert (await ask(c)).title == GOOD["title"]
    finally:
        await c.aclose()
    assert len(llm.requests) == 3


async def test_a_400_is_not_retried(llm: ScriptedLLM) -> None:
    llm.push(Reply(status=400, raw='{"error": "bad model"}'), Reply(GOOD))
    c = client(llm, max_retries=3)
    try:
        with pytest.raises(ProviderError, match="400") as info:
            await ask(c)
        assert not isinstance(info.value, ProviderUnavailable)
    finally:
        await c.aclose()
    assert len(llm.requests) == 1


@pytest.mark.parametrize("same", [True, False])
async def test_the_equivalence_check_asks_the_model(llm: ScriptedLLM, same: bool) -> None:
    llm.push(Reply({"same": same, "reason": "checked"}))
    c = client(llm)
    try:
        answer = await LLMExtractor(c).same_fact(
            "Tim prefers Celsius.", "Tim likes temperatures in Celsius."
        )
    finally:
        await c.aclose()
    assert answer is same
    prompt = llm.prompts()[0]
    assert "A: Tim prefers Celsius." in prompt and "B: Tim likes temperatures in Celsius." in prompt


async def test_a_500_that_keeps_coming_is_a_refusal_and_a_401_is_not_retried(
    llm: ScriptedLLM,
) -> None:
    """One status table for every provider call (shared/provider_http.py): the same
    answers mean the same thing here as in the embeddings client."""
    llm.push(*[Reply(status=500, raw='{"error": {"message": "boom"}}')] * 3)
    c = client(llm, max_retries=2)
    try:
        with pytest.raises(ProviderError, match="boom") as info:
            await ask(c)
        assert not isinstance(info.value, ProviderUnavailable)
        assert not info.value.retryable
        llm.push(Reply(status=401, raw='{"error": {"message": "bad key"}}'))
        with pytest.raises(ProviderError, match="401: bad key"):
            await ask(c)
    finally:
        await c.aclose()
    assert len(llm.requests) == 4  # three tries of the 500, one of the 401


async def test_jobs_whose_output_stays_invalid_are_done_offline(llm: ScriptedLLM) -> None:
    """OfflineOnInvalid: a malformed answer never loses the job; a valid one is used."""
    from shared.llm.jobs import OfflineOnInvalid
    from shared.llm.offline import OfflineExtractor

    llm.push(
        Reply("{'same': yes}"),  # equivalence: invalid, then the offline word rule
        Reply({"contradicts": True, "reason": "moved"}),  # contradiction: valid, used
        Reply('{"contradicts": "maybe"'),  # contradiction: invalid, offline cannot tell
        Reply({"same": False, "reason": "different"}),  # equivalence: valid, used
    )
    c = client(llm, invalid_retries=0)
    ex = OfflineOnInvalid(LLMExtractor(c), OfflineExtractor())
    try:
        assert await ex.same_fact("Tim drinks green tea.", "Tim drinks green tea daily.")
        assert await ex.contradicts("Tim lives in Paris.", "Tim lives in Rome.") is True
        assert await ex.contradicts("Tim likes tea.", "Tim drinks tea.") is None
        assert not await ex.same_fact("Tim drinks green tea.", "Tim drinks green tea daily.")
    finally:
        await c.aclose()
    assert ex.offline_jobs == ["equivalence", "contradiction"]
    assert ex.errors[0].startswith("equivalence: equivalence: model scripted-1 gave invalid")
    assert ex.name == "scripted-1" and not ex.heuristic
