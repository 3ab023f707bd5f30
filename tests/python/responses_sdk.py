"""The OpenAI Responses API through a translating Sluice gateway to Anthropic- and
Gemini-speaking upstreams, with the official openai Python SDK: text whole and streamed
(`stream=True` and the `responses.stream()` helper), function tools over two turns, and
reasoning whose signed thinking comes back in a reasoning item's `encrypted_content` and
goes back to the upstream on the next turn (the mock checks the signatures it issued).

Usage: python responses_sdk.py GATEWAY_URL

The gateway (crates/sluice-gateway/tests/sdk.rs, official_sdk_responses_api_to_any_provider)
routes:
  via-anthropic  -> provider "anthropic"
  via-gemini3    -> provider "gemini", model gemini-3-pro-preview (signs every call)
  via-gemini     -> provider "gemini", model gemini-2.5-flash
Prints 'N passed, M failed' and exits non-zero on a failure.
"""

import sys
import time

import openai
import checks

BASE = sys.argv[1].rstrip("/")
oai = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-client", max_retries=0)

SEARCH = {
    "type": "function",
    "name": "search",
    "description": "search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}
MODELS = ("via-anthropic", "via-gemini", "via-gemini3")


def mock(spec):
    return {"x-mock": spec}


def check_sequence(events):
    """The protocol as a client sees it: numbered from 0, created first, one final event."""
    assert [e.sequence_number for e in events] == list(range(len(events))), events
    assert events[0].type == "response.created", events[0]
    assert events[1].type == "response.in_progress", events[1]
    assert events[-1].type == "response.completed", events[-1]


def test_text_whole_and_streamed():
    for model in MODELS:
        r = oai.responses.create(
            model=model, input="hello", instructions="be brief",
            extra_headers=mock("tokens=5"),
        )
        assert r.object == "response" and r.status == "completed", (model, r)
        assert len(r.output_text.split(" ")) == 5, (model, r.output_text)
        assert r.usage.output_tokens >= 5 and r.usage.input_tokens > 0, (model, r.usage)
        assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens

        # stream=True: the raw events, in order.
        events = list(oai.responses.create(
            model=model, input="hello", stream=True, extra_headers=mock("tokens=5"),
        ))
        check_sequence(events)
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        done = [e.text for e in events if e.type == "response.output_text.done"]
        assert done == [deltas] and len(deltas.split(" ")) == 5, (model, deltas, done)
        final = events[-1].response
        assert final.output_text == deltas and final.usage.output_tokens >= 5, (model, final)

        # The SDK's stream helper accumulates the same response.
        with oai.responses.stream(
            model=model, input="hello", extra_headers=mock("tokens=5"),
        ) as s:
            text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
            final = s.get_final_response()
        assert final.output_text == text and len(text.split(" ")) == 5, (model, final)


def first_turn(model, stream):
    """Turn 1 of a tool-using conversation with reasoning on: the output items."""
    args = dict(
        model=model, input=[{"role": "user", "content": "find the weather"}],
        tools=[SEARCH], reasoning={"effort": "low", "summary": "auto"},
        include=["reasoning.encrypted_content"], max_output_tokens=200,
        extra_headers=mock("tools, tokens=3"),
    )
    if stream:
        with oai.responses.stream(**args) as s:
            events = list(s)
            r = s.get_final_response()
        summary = "".join(
            e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
        assert summary, (model, [e.type for e in events])
        assert not any(e.type == "response.output_text.delta" and "Thinking" in e.delta
                       for e in events), "reasoning never mixed into the answer"
        args_done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert args_done and args_done[0].arguments, (model, events)
    else:
        r = oai.responses.create(**args)
    kinds = [i.type for i in r.output]
    assert kinds[0] == "reasoning" and kinds[-1] == "function_call", (model, kinds)
    assert r.output[0].summary and r.output[0].summary[0].text, (model, r.output[0])
    assert r.usage.output_tokens_details.reasoning_tokens > 0, (model, r.usage)
    return r


def second_turn(model, items, call_output="sunny, 18C"):
    calls = [i for i in items if i["type"] == "function_call"]
    return oai.responses.create(
        model=model,
        input=[{"role": "user", "content": "find the weather"}] + items + [
            {"type": "function_call_output", "call_id": c["call_id"], "output": call_output}
            for c in calls
        ],
        tools=[SEARCH], reasoning={"effort": "low"}, max_output_tokens=200,
        extra_headers=mock("tokens=4"),
    )


def expect_400(fn, needle):
    try:
        fn()
    except openai.BadRequestError as e:
        assert needle in str(e), (needle, str(e))
        return
    raise AssertionError("expected a 400 containing " + needle)


def test_two_turns_on_anthropic_with_signed_thinking():
    for stream in (False, True):
        r = first_turn("via-anthropic", stream)
        rs = r.output[0]
        assert rs.encrypted_content, ("the signature, kept by the SDK", rs)
        # The items as the SDK dumps them, sent back as they are.
        items = [i.model_dump(exclude_none=True) for i in r.output]
        r2 = second_turn("via-anthropic", items)
        assert r2.status == "completed", r2
        assert len(r2.output_text.split(" ")) == 4, r2.output_text
        # Without the reasoning item Anthropic refuses the turn...
        bare = [i for i in items if i["type"] != "reasoning"]
        expect_400(lambda: second_turn("via-anthropic", bare),
                   "Expected `thinking` or `redacted_thinking`, but found `tool_use`")
        # ...and with an altered signature too.
        altered = [dict(i, encrypted_content=i["encrypted_content"][:-4] + "AAA=")
                   if i["type"] == "reasoning" else i for i in items]
        expect_400(lambda: second_turn("via-anthropic", altered),
                   "Invalid `signature` in `thinking` block")


def test_two_turns_on_gemini_3_with_thought_signatures():
    for stream in (False, True):
        r = first_turn("via-gemini3", stream)
        call = r.output[-1]
        assert "__thought__" in call.call_id, call
        items = [i.model_dump(exclude_none=True) for i in r.output]
        r2 = second_turn("via-gemini3", items)
        assert r2.status == "completed" and len(r2.output_text.split(" ")) == 4, r2
        stripped = [dict(i, call_id=i["call_id"].split("__thought__")[0])
                    if i["type"] == "function_call" else i for i in items]
        expect_400(lambda: second_turn("via-gemini3", stripped),
                   "Function call is missing a thought_signature")


def test_gemini_thoughts_are_reasoning_items():
    r = oai.responses.create(
        model="via-gemini", input="think", reasoning={"effort": "medium", "summary": "auto"},
        extra_headers=mock("tokens=5"),
    )
    assert r.output[0].type == "reasoning", r.output
    assert r.output[0].summary[0].text.startswith("Thinking:"), r.output[0]
    assert not r.output_text.startswith("Thinking:"), ("never mixed into the answer", r)
    assert r.usage.output_tokens_details.reasoning_tokens > 0, r.usage


def test_cut_answers_are_incomplete():
    r = oai.responses.create(
        model="via-anthropic", input="hello", max_output_tokens=3,
        extra_headers=mock("tokens=10"),
    )
    assert r.status == "incomplete", r
    assert r.incomplete_details.reason == "max_output_tokens", r


def test_errors_in_the_openai_shape():
    # An upstream error before the answer: the SDK's own exception class.
    try:
        oai.responses.create(model="via-anthropic", input="hi", extra_headers=mock("status=429"))
    except openai.RateLimitError as e:
        assert e.status_code == 429, e
    else:
        raise AssertionError("expected a RateLimitError")
    # A parameter only OpenAI has: a 400 that names it.
    expect_400(lambda: oai.responses.create(
        model="via-anthropic", input="hi", previous_response_id="resp_123",
    ), "previous_response_id")


def test_background_responses_polled_and_streamed():
    # `background=True` on any provider: the gateway owns the generation; the SDK polls it
    # with `retrieve` and streams it from a sequence number with `retrieve(stream=True)`.
    for model in MODELS:
        r = oai.responses.create(
            model=model, input="hello", background=True,
            extra_headers=mock("tokens=5, interval_ms=20"),
        )
        assert r.status == "queued" and r.id.startswith("resp_"), (model, r)
        seen = {r.status}
        for _ in range(500):
            got = oai.responses.retrieve(r.id)
            seen.add(got.status)
            if got.status not in ("queued", "in_progress"):
                break
            time.sleep(0.01)
        assert got.status == "completed", (model, got)
        assert got.id == r.id, (model, got.id)
        assert len(got.output_text.split(" ")) == 5, (model, got.output_text)
        assert "in_progress" in seen or "queued" in seen, seen
        events = list(oai.responses.retrieve(r.id, stream=True, starting_after=2))
        assert events[0].sequence_number == 3, (model, events[0])
        assert events[-1].type == "response.completed", (model, events[-1])
        everything = list(oai.responses.retrieve(r.id, stream=True))
        check_sequence(everything)
        assert everything[3:] == events, model
    # Another response's id: the SDK's NotFoundError.
    try:
        oai.responses.retrieve("resp_" + "0" * 32)
    except openai.NotFoundError as e:
        assert e.status_code == 404, e
    else:
        raise AssertionError("expected a NotFoundError")


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    checks.run(tests)


if __name__ == "__main__":
    main()
