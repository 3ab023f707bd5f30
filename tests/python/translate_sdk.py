"""The official openai and anthropic Python SDKs through a Sluice gateway that translates to
other providers (the mock behind it speaks each provider's real format).

Usage: python translate_sdk.py GATEWAY_URL

The gateway (crates/sluice-gateway/tests/sdk.rs) routes model names to upstreams:
  via-openai     -> provider "openai"
  via-anthropic  -> provider "anthropic"
  via-gemini     -> provider "gemini"
Prints 'N passed, M failed' and exits non-zero on a failure.
"""

import json
import sys

import anthropic
import openai
import checks

BASE = sys.argv[1].rstrip("/")
oai = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-client", max_retries=0)
ant = anthropic.Anthropic(base_url=BASE, api_key="sk-client", max_retries=0)

WEATHER_OAI = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
WEATHER_ANT = {
    "name": "search",
    "description": "search the web",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}


def mock(spec):
    return {"x-mock": spec}


def openai_targets():
    return ["via-anthropic", "via-gemini"]


def anthropic_targets():
    return ["via-openai", "via-gemini"]


def test_openai_sdk_text_and_usage():
    for model in openai_targets():
        r = oai.chat.completions.create(
            model=model,
            messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            max_tokens=100,
            extra_headers=mock("tokens=5"),
        )
        assert r.object == "chat.completion", model
        assert len(r.choices[0].message.content.split(" ")) == 5, (model, r)
        assert r.choices[0].finish_reason == "stop", (model, r)
        assert r.usage.completion_tokens == 5, (model, r.usage)
        assert r.usage.prompt_tokens > 0, (model, r.usage)


def test_openai_sdk_stream_with_usage():
    for model in openai_targets():
        s = oai.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=100,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=mock("tokens=6"),
        )
        text, usage, finish = "", None, None
        for chunk in s:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
        assert len(text.split(" ")) == 6, (model, text)
        assert finish == "stop", (model, finish)
        assert usage is not None and usage.completion_tokens == 6, (model, usage)


def test_openai_sdk_tool_round_trip():
    for model in openai_targets():
        msgs = [{"role": "user", "content": "find something"}]
        r = oai.chat.completions.create(
            model=model, messages=msgs, tools=[WEATHER_OAI], max_tokens=100,
            extra_headers=mock("tools, tokens=3"),
        )
        call = r.choices[0].message.tool_calls[0]
        assert r.choices[0].finish_reason == "tool_calls", (model, r)
        assert call.function.name == "search", (model, call)
        args = json.loads(call.function.arguments)
        assert len(args["query"].split(" ")) == 3, (model, args)
        # Streamed, the arguments reassemble to the same JSON.
        s = oai.chat.completions.create(
            model=model, messages=msgs, tools=[WEATHER_OAI], max_tokens=100, stream=True,
            extra_headers=mock("tools, tokens=3"),
        )
        streamed, finish = "", None
        for chunk in s:
            for c in chunk.choices:
                for tc in c.delta.tool_calls or []:
                    streamed += tc.function.arguments or ""
                finish = c.finish_reason or finish
        assert json.loads(streamed) == args, (model, streamed)
        assert finish == "tool_calls", (model, finish)
        # The tool's result goes back, and the model answers in text.
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "18C and sunny"},
        ]
        r2 = oai.chat.completions.create(
            model=model, messages=msgs, tools=[WEATHER_OAI], max_tokens=100,
            extra_headers=mock("tokens=4"),
        )
        assert r2.choices[0].finish_reason == "stop", (model, r2)
        assert r2.choices[0].message.content, (model, r2)


def test_anthropic_sdk_text_and_usage():
    for model in anthropic_targets():
        r = ant.messages.create(
            model=model, max_tokens=100, system="be brief",
            messages=[{"role": "user", "content": "hi"}], extra_headers=mock("tokens=4"),
        )
        assert r.type == "message", model
        assert r.stop_reason == "end_turn", (model, r)
        assert len(r.content[0].text.split(" ")) == 4, (model, r)
        assert r.usage.output_tokens == 4, (model, r.usage)
        assert r.usage.input_tokens > 0, (model, r.usage)


def test_anthropic_sdk_stream():
    for model in anthropic_targets():
        with ant.messages.stream(
            model=model, max_tokens=100, messages=[{"role": "user", "content": "hi"}],
            extra_headers=mock("tokens=5"),
        ) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        assert len(text.split(" ")) == 5, (model, text)
        assert final.stop_reason == "end_turn", (model, final)
        assert final.usage.output_tokens == 5, (model, final.usage)


def test_anthropic_sdk_tool_round_trip():
    for model in anthropic_targets():
        msgs = [{"role": "user", "content": "find something"}]
        r = ant.messages.create(
            model=model, max_tokens=100, tools=[WEATHER_ANT], messages=msgs,
            extra_headers=mock("tools, tokens=3"),
        )
        assert r.stop_reason == "tool_use", (model, r)
        use = [b for b in r.content if b.type == "tool_use"][0]
        assert use.name == "search", (model, use)
        assert len(use.input["query"].split(" ")) == 3, (model, use)
        with ant.messages.stream(
            model=model, max_tokens=100, tools=[WEATHER_ANT], messages=msgs,
            extra_headers=mock("tools, tokens=3"),
        ) as s:
            final = s.get_final_message()
        streamed = [b for b in final.content if b.type == "tool_use"][0]
        assert streamed.input == use.input, (model, streamed, use)
        assert final.stop_reason == "tool_use", (model, final)
        msgs += [
            {"role": "assistant", "content": [b.model_dump() for b in r.content]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "18C and sunny"},
            ]},
        ]
        r2 = ant.messages.create(
            model=model, max_tokens=100, tools=[WEATHER_ANT], messages=msgs,
            extra_headers=mock("tokens=4"),
        )
        assert r2.stop_reason == "end_turn", (model, r2)
        assert r2.content[0].text, (model, r2)


def test_errors_have_the_right_sdk_class():
    cases = [
        ("via-anthropic", "error=rate_limit", openai.RateLimitError),
        ("via-anthropic", "error=overloaded", openai.InternalServerError),
        ("via-anthropic", "error=invalid", openai.BadRequestError),
        ("via-gemini", "error=context_length", openai.BadRequestError),
        ("via-anthropic", "error=auth", openai.AuthenticationError),
        # Gemini answers a bad key with 400 INVALID_ARGUMENT (API_KEY_INVALID), as it does.
        ("via-gemini", "error=auth", openai.BadRequestError),
    ]
    for model, spec, cls in cases:
        try:
            oai.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=10,
                extra_headers=mock(spec),
            )
        except cls:
            pass
        else:
            raise AssertionError(f"{model} {spec}: no {cls.__name__}")
    ant_cases = [
        ("via-openai", "error=rate_limit", anthropic.RateLimitError),
        ("via-openai", "error=invalid", anthropic.BadRequestError),
        ("via-gemini", "error=overloaded", anthropic.InternalServerError),
    ]
    for model, spec, cls in ant_cases:
        try:
            ant.messages.create(
                model=model, max_tokens=10, messages=[{"role": "user", "content": "hi"}],
                extra_headers=mock(spec),
            )
        except cls:
            pass
        else:
            raise AssertionError(f"{model} {spec}: no {cls.__name__}")


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    checks.run(tests)


if __name__ == "__main__":
    main()
