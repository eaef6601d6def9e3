"""What of a session outlives its socket, as plain data: settings and finished items.

A record is JSON-shaped (dicts, lists, strings, numbers), so any store can keep it: a Ray
actor pickles it, Redis would take it as JSON. It holds the settings as ``session.updated``
shows them and, per finished item, its text (user speech as its transcript; a spoken answer
as the words the listener got, with where each piece's audio ended, so a resumed session
can still truncate it). No audio is kept: a prompt is made of text only.

Only items the client was told are finished (``conversation.item.done``) are kept, so the
answer in flight when a socket is lost is never replayed, as complete or otherwise.
"""

from typing import Any, TypedDict

from deployments.realtime.items import AssistantMessage, FunctionCall, FunctionCallOutput, InputText, Item, UserAudio


class SessionState(TypedDict):
    settings: dict[str, Any]
    """The session object of ``session.updated`` (JSON mode, ``None`` fields left out)."""
    items: list[dict[str, Any]]
    """The finished items, oldest first (:func:`item_record`)."""


def item_record(item: Item) -> dict[str, Any]:
    """``item`` as plain data (:func:`item_from_record` reads it back)."""
    match item:
        case InputText():
            return {"kind": "input_text", "id": item.id, "text": item.text, "role": item.role}
        case UserAudio():
            return {"kind": "user_audio", "id": item.id, "text": item.text, "failed": item.transcription_failed}
        case AssistantMessage():
            return {
                "kind": "assistant",
                "id": item.id,
                "spoken_aloud": item.spoken_aloud,
                "text": item.text,
                "spoken": [list(piece) for piece in item.spoken],
                "audio_ms": item.audio_ms,
            }
        case FunctionCall():
            return {
                "kind": "function_call",
                "id": item.id,
                "call_id": item.call_id,
                "name": item.name,
                "arguments": item.arguments,
            }
        case FunctionCallOutput():
            return {"kind": "function_call_output", "id": item.id, "call_id": item.call_id, "output": item.output}


def item_from_record(record: dict[str, Any]) -> Item:
    """The item :func:`item_record` described (needs a running event loop: a user's
    speech is rebuilt as already transcribed)."""
    match record["kind"]:
        case "input_text":
            return InputText(record["id"], record["text"], record["role"])
        case "user_audio":
            audio = UserAudio(record["id"])
            if record["failed"]:
                audio.not_heard()
            else:
                audio.heard(record["text"])
            return audio
        case "assistant":
            spoken = [(float(end), str(text)) for end, text in record["spoken"]]
            answer = AssistantMessage(record["id"], record["spoken_aloud"], record["text"], spoken, record["audio_ms"])
            answer.sent_chars = len(answer.text)
            return answer
        case "function_call":
            return FunctionCall(record["id"], record["call_id"], record["name"], record["arguments"])
        case "function_call_output":
            return FunctionCallOutput(record["id"], record["call_id"], record["output"])
    raise ValueError(f"unknown item kind {record['kind']!r}")
