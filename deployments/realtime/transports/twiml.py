"""The TwiML a call's voice webhook answers with: connect the call to its media stream and
come back when the stream closes, end it as its agent decided, or turn it away
(https://www.twilio.com/docs/voice/twiml). Every value is XML-escaped."""

from xml.sax.saxutils import escape, quoteattr

from deployments.realtime.transports.call_control import CallEnding


def twiml_connect(stream_url: str, parameters: dict[str, str], redirect_path: str | None = None) -> str:
    """The TwiML that answers a call by connecting it to ``stream_url`` (bidirectional).
    With ``redirect_path`` (the voice webhook's), a stream that closes while the call goes
    on brings the call back to the webhook, which knows how it goes on."""
    tags = "".join(f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in parameters.items())
    then = f'<Redirect method="POST">{escape(redirect_path)}</Redirect>' if redirect_path is not None else ""
    return _twiml(f"<Connect><Stream url={quoteattr(stream_url)}>{tags}</Stream></Connect>{then}")


def twiml_ending(ending: CallEnding) -> str:
    """The TwiML that ends a call as its agent decided: hung up, or dialled on."""
    return _twiml("<Hangup/>" if ending.how == "hang_up" else f"<Dial>{escape(ending.to)}</Dial>")


def twiml_turned_away(message: str) -> str:
    """The TwiML that tells a caller the server cannot take the call, and hangs up."""
    return _twiml(f"<Say>{escape(message)}</Say><Hangup/>")


def _twiml(verbs: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?><Response>{verbs}</Response>'
