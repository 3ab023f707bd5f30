"""Reasoning models through a translating Sluice gateway, with the official openai and
anthropic Python SDKs (the mock behind it reasons in each provider's real format, signs its
thinking as the real APIs do, and refuses a next turn whose signed thinking is missing or
altered with the real APIs' 400).

Usage: python reasoning_sdk.py GATEWAY_URL

The gateway (crates/sluice-gateway/tests/sdk.rs, official_sdks_with_reasoning) routes:
  via-openai     -> provider "openai" (answers with reasoning_content, as vLLM/DeepSeek do)
  via-anthropic  -> provider "anthropic"
  via-gemini3    -> provider "gemini", model gemini-3-pro-preview (signs every call)
  via-gemini     -> provider "gemini", model gemini-2.5-flash
Prints 'N passed, M failed' and exits non-zero on a failure.
"""

import sys

import anthropic
import openai
import checks

BASE = sys.argv[1].rstrip("/")
oai = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-client", max_retries=0)
ant = anthropic.Anthropic(base_url=BASE, api_key="sk-client", max_retries=0)

SEARCH_OAI = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


def mock(spec):
    return {"x-mock": spec}


def extra(obj, name):
    """An extra field the SDK kept on a response model."""
    return (obj.model_extra or {}).get(name)


def first_turn(model, stream):
    """Turn 1 of a tool-using conversation with reasoning on: the assistant message as the
    client keeps it (a dict), built from a whole response or from the stream's chunks."""
    msgs = [{"role": "user", "content": "find the weather"}]
    if not stream:
        r = oai.chat.completions.create(
            model=model, messages=msgs, tools=[SEARCH_OAI], reasoning_effort="low",
            max_completion_tokens=200, extra_headers=mock("tools, tokens=3"),
        )
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls", (model, r)
        assert extra(m, "reasoning_content"), (model, m)
        assert r.usage.completion_tokens_details.reasoning_tokens > 0, (model, r.usage)
        # The assistant message as the SDK dumps it: the extra fields come along.
        return msgs, m.model_dump(exclude_none=True)
    s = oai.chat.completions.create(
        model=model, messages=msgs, tools=[SEARCH_OAI], reasoning_effort="low",
        max_completion_tokens=200, stream=True, stream_options={"include_usage": True},
        extra_headers=mock("tools, tokens=3"),
    )
    reasoning, blocks, calls, usage, finish = "", [], {}, None, None
    for chunk in s:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            d = c.delta
            reasoning += extra(d, "reasoning_content") or ""
            for b in extra(d, "thinking_blocks") or []:
                b = dict(b)
                assert b.pop("index") == len(blocks), b
                blocks.append(b)
            assert not d.content, ("reasoning never mixed into the answer", d)
            for tc in d.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = tc.id or call["id"]
                call["name"] = (tc.function.name or "") or call["name"]
                call["arguments"] += tc.function.arguments or ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls", (model, finish)
    assert reasoning, model
    assert usage.completion_tokens_details.reasoning_tokens > 0, (model, usage)
    msg = {
        "role": "assistant",
        "content": None,
        "reasoning_content": reasoning,
        "tool_calls": [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls.values()
        ],
    }
    if blocks:
        msg["thinking_blocks"] = blocks
    return msgs, msg


def second_turn(model, msgs, assistant):
    msgs = msgs + [assistant] + [
        {"role": "tool", "tool_call_id": c["id"], "content": "sunny, 18C"}
        for c in assistant["tool_calls"]
    ]
    return oai.chat.completions.create(
        model=model, messages=msgs, tools=[SEARCH_OAI], reasoning_effort="low",
        max_completion_tokens=200, extra_headers=mock("tokens=4"),
    )


def expect_400(fn, needle):
    try:
        fn()
    except openai.BadRequestError as e:
        assert needle in str(e), (needle, str(e))
        return
    raise AssertionError("expected a 400 containing " + needle)


def test_openai_sdk_two_turns_on_anthropic_with_signed_thinking():
    for stream in (False, True):
        msgs, assistant = first_turn("via-anthropic", stream)
        blocks = assistant.get("thinking_blocks")
        assert blocks and blocks[0]["type"] == "thinking" and blocks[0]["signature"], assistant
        assert blocks[0]["thinking"] == assistant["reasoning_content"], assistant
        # Turn 2: the mock (speaking Anthropic) checks the signature it issued.
        r = second_turn("via-anthropic", msgs, assistant)
        assert r.choices[0].finish_reason == "stop", r
        assert len(r.choices[0].message.content.split(" ")) == 4, r
        # Without the signed thinking Anthropic refuses the turn...
        bare = {k: v for k, v in assistant.items() if k != "thinking_blocks"}
        expect_400(lambda: second_turn("via-anthropic", msgs, bare),
                   "Expected `thinking` or `redacted_thinking`, but found `tool_use`")
        # ...and an altered signature too.
        altered = dict(assistant)
        altered["thinking_blocks"] = [dict(blocks[0], signature=blocks[0]["signature"][:-4] + "AAA=")]
        expect_400(lambda: second_turn("via-anthropic", msgs, altered),
                   "Invalid `signature` in `thinking` block")


def test_openai_sdk_two_turns_on_gemini_3_with_thought_signatures():
    for stream in (False, True):
        msgs, assistant = first_turn("via-gemini3", stream)
        call_id = assistant["tool_calls"][0]["id"]
        assert "__thought__" in call_id, call_id
        r = second_turn("via-gemini3", msgs, assistant)
        assert r.choices[0].finish_reason == "stop", r
        # The same turn with the call's signature gone: Gemini 3's own refusal.
        stripped = dict(assistant)
        stripped["tool_calls"] = [
            dict(c, id=c["id"].split("__thought__")[0]) for c in assistant["tool_calls"]
        ]
        msgs2 = msgs + [stripped] + [
            {"role": "tool", "tool_call_id": c["id"], "content": "sunny"}
            for c in stripped["tool_calls"]
        ]
        expect_400(
            lambda: oai.chat.completions.create(
                model="via-gemini3", messages=msgs2, tools=[SEARCH_OAI],
                reasoning_effort="low", extra_headers=mock("tokens=4"),
            ),
            "Function call is missing a thought_signature",
        )


def test_openai_sdk_reads_gemini_thoughts():
    r = oai.chat.completions.create(
        model="via-gemini", messages=[{"role": "user", "content": "think"}],
        reasoning_effort="medium", extra_headers=mock("tokens=5"),
    )
    m = r.choices[0].message
    assert extra(m, "reasoning_content").startswith("Thinking:"), m
    assert not m.content.startswith("Thinking:"), ("never mixed into the answer", m)
    assert r.usage.completion_tokens_details.reasoning_tokens > 0, r.usage


def test_anthropic_sdk_thinking_from_an_openai_upstream():
    for model in ("via-openai", "via-gemini"):
        r = ant.messages.create(
            model=model, max_tokens=4000, messages=[{"role": "user", "content": "think"}],
            thinking={"type": "enabled", "budget_tokens": 2048},
            extra_headers=mock("tokens=5"),
        )
        kinds = [b.type for b in r.content]
        assert kinds == ["thinking", "text"], (model, r)
        assert r.content[0].thinking.startswith("Thinking:"), (model, r)
        assert len(r.content[1].text.split(" ")) == 5, (model, r)
        # Streamed: the SDK's accumulator builds the same blocks from thinking_delta.
        with ant.messages.stream(
            model=model, max_tokens=4000, messages=[{"role": "user", "content": "think"}],
            thinking={"type": "enabled", "budget_tokens": 2048},
            extra_headers=mock("tokens=5"),
        ) as s:
            thinking = "".join(e.thinking for e in s if e.type == "thinking")
            final = s.get_final_message()
        assert [b.type for b in final.content] == ["thinking", "text"], (model, final)
        assert final.content[0].thinking == thinking == r.content[0].thinking, (model, final)
        assert final.content[1].text == r.content[1].text, (model, final)
        # The next turn sends the (unsigned) thinking back: the gateway leaves it out for
        # the upstream, and the turn goes through.
        r2 = ant.messages.create(
            model=model, max_tokens=4000,
            thinking={"type": "enabled", "budget_tokens": 2048},
            messages=[{"role": "user", "content": "think"},
                      {"role": "assistant", "content": [b.model_dump() for b in final.content]},
                      {"role": "user", "content": "again"}],
            extra_headers=mock("tokens=3"),
        )
        assert r2.content[-1].type == "text", (model, r2)


def test_anthropic_sdk_without_thinking_gets_none():
    # The mock reasons only when asked (reasoning_effort upstream): without `thinking` the
    # translation asks nothing, and the answer has no thinking block.
    r = ant.messages.create(
        model="via-openai", max_tokens=400, messages=[{"role": "user", "content": "hi"}],
        extra_headers=mock("tokens=3"),
    )
    assert [b.type for b in r.content] == ["text"], r
    assert r.usage.output_tokens == 3, r.usage


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    checks.run(tests)


if __name__ == "__main__":
    main()
