# SPDX-License-Identifier: Apache-2.0
"""A client of an OpenAI- or Anthropic-compatible server, through the real
SDK, run as its own process by tests/test_streams_*.py. It records the
CLOCK_MONOTONIC time of every chunk the SDK yields (an event carrying
output, as docs/spec.md §11 counts chunks) and prints one JSON object:
{"pid": ..., "streams": [{"t0": ns before the call, "times": [ns, ...],
"status": "done"|"cancelled"}]}.

  stream_client.py API BASE_URL PROMPT [--cafile F] [--streams K] [--parallel]
                   [--plain-first] [--cancel-after N] [--exit-after N]
                   [--wait-file F] [--pause-after N --pause-file F] [--async]

--wait-file: start streaming once F exists (the SDK already imported, its
libraries mapped). --async: the SDK's async client (asyncio's TLS, through
memory BIOs), one stream. --pause-after: after N chunks, stop reading until
--pause-file exists, the stream left open meanwhile.
"""

import argparse
import json
import os
import sys
import threading
import time


def now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def make_client(api: str, base_url: str, cafile: str | None, is_async: bool = False):
    if is_async:
        import ssl

        import anthropic
        import openai

        verify = ssl.create_default_context(cafile=cafile) if cafile else True
        if api == "openai":
            return openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="test", max_retries=0,
                                      http_client=openai.DefaultAsyncHttpxClient(verify=verify))
        return anthropic.AsyncAnthropic(
            base_url=base_url, api_key="test", max_retries=0,
            http_client=anthropic.DefaultAsyncHttpxClient(verify=verify))
    if api == "openai":
        import openai

        http = openai.DefaultHttpxClient(verify=cafile) if cafile else None
        return openai.OpenAI(base_url=base_url + "/v1", api_key="test", http_client=http,
                             max_retries=0)
    import anthropic

    http = anthropic.DefaultHttpxClient(verify=cafile) if cafile else None
    return anthropic.Anthropic(base_url=base_url, api_key="test", http_client=http,
                               max_retries=0)


def carries_output(api: str, item) -> bool:
    if api == "openai":
        return any(c.delta and (c.delta.content or getattr(c.delta, "reasoning_content", None)
                                or c.delta.tool_calls) for c in item.choices)
    return item.type == "content_block_delta"


def wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.02)


def one_stream(api: str, client, prompt: str, stop_after: int | None, exit_after: int | None,
               pause: tuple[int, str] | None = None):
    messages = [{"role": "user", "content": prompt}]
    t0 = now()
    if api == "openai":
        stream = client.chat.completions.create(model="gpt-test", messages=messages, stream=True)
    else:
        stream = client.messages.create(model="claude-test", max_tokens=64, messages=messages,
                                        stream=True)
    times = []
    for item in stream:
        if carries_output(api, item):
            times.append(now())
            if exit_after is not None and len(times) >= exit_after:
                print(json.dumps({"pid": os.getpid(), "streams": [{"t0": t0, "times": times,
                                                                    "status": "cancelled"}]}),
                      flush=True)
                os._exit(0)  # mid-stream, the connection still open
            if pause and len(times) == pause[0]:
                print("paused", flush=True)
                wait_for(pause[1])
            if stop_after is not None and len(times) >= stop_after:
                stream.close()  # the reader closes before the end
                return {"t0": t0, "times": times, "status": "cancelled"}
    return {"t0": t0, "times": times, "status": "done"}


async def one_stream_async(api: str, client, prompt: str, stop_after: int | None):
    messages = [{"role": "user", "content": prompt}]
    t0 = now()
    if api == "openai":
        stream = await client.chat.completions.create(model="gpt-test", messages=messages,
                                                      stream=True)
    else:
        stream = await client.messages.create(model="claude-test", max_tokens=64,
                                              messages=messages, stream=True)
    times = []
    async for item in stream:
        if carries_output(api, item):
            times.append(now())
            if stop_after is not None and len(times) >= stop_after:
                await stream.close()
                return {"t0": t0, "times": times, "status": "cancelled"}
    return {"t0": t0, "times": times, "status": "done"}


def plain_request(api: str, client, prompt: str) -> None:
    """A response that is not an event stream, on the same connection."""
    messages = [{"role": "user", "content": prompt}]
    if api == "openai":
        client.chat.completions.create(model="gpt-test", messages=messages)
    else:
        client.messages.create(model="claude-test", max_tokens=64, messages=messages)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("api", choices=["openai", "anthropic"])
    p.add_argument("base_url")
    p.add_argument("prompt")
    p.add_argument("--cafile")
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--parallel", action="store_true")
    p.add_argument("--plain-first", action="store_true")
    p.add_argument("--cancel-after", type=int)
    p.add_argument("--exit-after", type=int)
    p.add_argument("--wait-file")
    p.add_argument("--pause-after", type=int)
    p.add_argument("--pause-file")
    p.add_argument("--async", dest="is_async", action="store_true")
    a = p.parse_args()
    pause = (a.pause_after, a.pause_file) if a.pause_after else None
    results: list = []
    if a.is_async:
        import asyncio

        client = make_client(a.api, a.base_url, a.cafile, is_async=True)
        results.append(asyncio.run(one_stream_async(a.api, client, a.prompt, a.cancel_after)))
    elif a.parallel:
        # two connections of one process, streaming at the same time
        def run(i: int) -> None:
            client = make_client(a.api, a.base_url, a.cafile)
            results.append(one_stream(a.api, client, a.prompt, None, None))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(a.streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        client = make_client(a.api, a.base_url, a.cafile)
        if a.wait_file:
            print("ready", flush=True)
            wait_for(a.wait_file)
        if a.plain_first:
            plain_request(a.api, client, a.prompt)
        for _ in range(a.streams):
            results.append(one_stream(a.api, client, a.prompt, a.cancel_after, a.exit_after,
                                      pause))
    print(json.dumps({"pid": os.getpid(), "streams": results}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
