"""A text chat with the voice agent that outlives the server changing under it.

    .venv/bin/python examples/chat.py "My name is Ada." "What is my name?"

Each question is sent as a text item and answered (the words print; the audio is not kept).
The session's ``session.created`` carries its ``resume_token`` (an extra field the stock SDK
keeps); when the connection is lost (a replica killed, drained or replaced: a close, or a
``session.draining`` event, asked for with ``?drain_notice=true``), the chat reconnects with
``?resume_token=`` (``extra_query``) and the server gives the same session back, its items
replayed first. A question whose answer was lost is asked again under the item id the
client gave it: if the resumed session already holds it, the server refuses the copy
(``invalid_value``, ``item.id``) and answers from the one it has. Uses only the stock
``openai`` SDK.
"""

import argparse
import asyncio
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from openai import AsyncOpenAI

GIVE_UP_S = 30.0
"""How long to try to resume: Serve replaces a lost replica in seconds."""


def message(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def chat(
    url: str, questions: list[str], on_answer: Callable[[str], Awaitable[None]] | None = None
) -> tuple[list[str], list[str]]:
    """Ask each question in turn; return the answers and the session id of each connection."""
    client = AsyncOpenAI(api_key="unused", websocket_base_url=url)
    ids = [f"item_chat_{secrets.token_hex(8)}" for _ in questions]
    answers: list[str] = []
    sessions: list[str] = []
    token: str | None = None
    lost_at: float | None = None
    while len(answers) < len(questions):
        query = {"drain_notice": "true"} | ({"resume_token": token} if token else {})
        draining = False
        try:
            async with client.realtime.connect(model="s2s", extra_query=query) as connection:

                async def ask() -> None:
                    item = message(ids[len(answers)], questions[len(answers)])
                    await connection.conversation.item.create(item=item)  # type: ignore[arg-type]
                    await connection.response.create()

                async for event in connection:
                    if event.type == "session.created":
                        sessions.append(event.session.id)  # type: ignore[union-attr]
                        token, lost_at = (event.session.model_extra or {})["resume_token"], None  # type: ignore[union-attr]
                        await ask()  # its items are replayed before anything asked now
                    elif event.type == "error" and event.error.param != "item.id":  # item.id: held already
                        print(f"error: {event.error.code}: {event.error.message}", file=sys.stderr)
                    elif event.type == "session.draining":
                        draining = True
                    elif event.type == "response.done":
                        if event.response.status == "completed":
                            answer = event.response.output[0].content[0].transcript or ""  # type: ignore[union-attr,index]
                            answers.append(answer)
                            print(f"agent: {answer}")
                            if on_answer is not None:
                                await on_answer(answer)
                        else:  # failed or cancelled: the same question again, a moment later
                            await asyncio.sleep(1.0)
                        if draining or len(answers) == len(questions):
                            break  # resume elsewhere now (or done)
                        await ask()  # the next question, or this one again
            if not draining and len(answers) < len(questions):
                raise ConnectionError("the server closed the connection")
        except Exception as error:  # lost or refused: resume, backing off, for GIVE_UP_S
            lost_at = lost_at or time.monotonic()
            if token is None or time.monotonic() - lost_at > GIVE_UP_S:
                raise
            print(f"(reconnecting: {type(error).__name__})", file=sys.stderr)
            await asyncio.sleep(0.5)
    return answers, sessions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("questions", nargs="+")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1", help="the server (make run prints it)")
    args = parser.parse_args(argv)
    asyncio.run(chat(args.url, args.questions))


if __name__ == "__main__":
    main()
