"""Reads translated client streams with the official SDKs' own stream accumulators.

Usage: stream_sdk.py DIR. Each DIR/<case>.openai.sse is read with openai's
`chat.completions.stream(...)` helper, each DIR/<case>.anthropic.sse with anthropic's
`messages.stream(...)`, both served by an httpx MockTransport (no network). Prints one JSON
object: {case: what the SDK made of it, or {"error": ...} if it raised}.
"""

import json
import pathlib
import sys

import anthropic
import httpx
import openai


def transport(body: bytes) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=body
        )

    return httpx.MockTransport(handler)


def read_openai(body: bytes) -> dict:
    client = openai.OpenAI(
        api_key="test",
        base_url="http://sluice.test/v1",
        http_client=httpx.Client(transport=transport(body)),
        max_retries=0,
    )
    try:
        with client.chat.completions.stream(
            model="client-model", messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            for _ in stream:
                pass
            final = stream.get_final_completion()
    except openai.LengthFinishReasonError as e:
        # The helper refuses to parse a cut answer but keeps what it accumulated.
        final = e.completion
    except openai.APIError as e:
        return {"error": e.message}
    choice = final.choices[0]
    return {
        "id": final.id,
        "content": choice.message.content,
        "tool_calls": [
            {"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
            for t in (choice.message.tool_calls or [])
        ],
        "finish_reason": choice.finish_reason,
        "usage": final.usage.model_dump(exclude_none=True) if final.usage else None,
    }


def read_anthropic(body: bytes) -> dict:
    client = anthropic.Anthropic(
        api_key="test",
        base_url="http://sluice.test",
        http_client=httpx.Client(transport=transport(body)),
        max_retries=0,
    )
    try:
        with client.messages.stream(
            model="client-model",
            max_tokens=100,
            messages=[{"role": "user", "content": "hi"}],
        ) as stream:
            message = stream.get_final_message()
    except anthropic.APIError as e:
        return {"error": e.message}
    blocks = []
    for b in message.content:
        if b.type == "text":
            blocks.append({"type": "text", "text": b.text})
        elif b.type == "tool_use":
            blocks.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
        elif b.type == "thinking":
            blocks.append({"type": "thinking", "thinking": b.thinking, "signature": b.signature})
        elif b.type == "redacted_thinking":
            blocks.append({"type": "redacted_thinking", "data": b.data})
        else:
            blocks.append({"type": b.type})
    return {
        "id": message.id,
        "content": blocks,
        "stop_reason": message.stop_reason,
        "usage": {
            "input_tokens": message.usage.input_tokens,
            "output_tokens": message.usage.output_tokens,
            "cache_read_input_tokens": message.usage.cache_read_input_tokens,
        },
    }


def main() -> None:
    results = {}
    for path in sorted(pathlib.Path(sys.argv[1]).glob("*.sse")):
        body = path.read_bytes()
        case = path.name[: -len(".sse")]
        if case.endswith(".openai"):
            results[case] = read_openai(body)
        elif case.endswith(".anthropic"):
            results[case] = read_anthropic(body)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
