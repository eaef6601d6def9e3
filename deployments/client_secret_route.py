"""The ingress's ``POST /v1/realtime/client_secrets``: an operator's backend trades the API
key for a short-lived ``ek_`` secret (:mod:`deployments.client_secrets`) that a browser or
app then uses, as OpenAI's GA API does (the stock SDK's ``client.realtime.client_secrets``).

Its ``session`` is checked now, as a ``session.update`` would be, so a bad one is a 400 here
rather than an error in every session the secret opens; the answer shows the session as
``session.created`` will.
"""

import json
from collections.abc import Callable
from typing import cast

from fastapi import Request
from fastapi.responses import JSONResponse
from openai.types.realtime import SessionUpdateEvent
from pydantic import ValidationError

from deployments.access import Access, refusal
from deployments.client_secrets import ClientSecretRequest, ClientSecrets
from deployments.realtime.protocol import ProtocolError, parse_client_event, validation_message
from deployments.realtime.settings import SessionSettings

MAX_BODY_BYTES = 64 << 10


class ClientSecretRoute:
    def __init__(self, access: Access, secrets: ClientSecrets, new_settings: Callable[[], SessionSettings]) -> None:
        """``new_settings``: a new session's settings, which the secret's are checked against."""
        self._access, self._secrets, self._new_settings = access, secrets, new_settings

    async def create(self, request: Request) -> JSONResponse:
        refused = self._access.bearer_refusal(request)
        if refused is not None:  # a client secret never makes another
            return refusal(403, "access_refused", refused)
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return refusal(413, "request_too_large", f"the body is over {MAX_BODY_BYTES} bytes")
        try:
            asked = ClientSecretRequest.model_validate_json(body or b"{}")
        except ValidationError as exc:
            param, message = validation_message(exc)
            return refusal(400, "invalid_request", f"{message} at {param!r}" if param else message)
        session = asked.session if asked.session is not None else {"type": "realtime"}
        settings = self._new_settings()
        try:
            update = parse_client_event(json.dumps({"type": "session.update", "session": session}))
            settings.update(cast(SessionUpdateEvent, update).session)
        except ProtocolError as error:
            where = f"session.{error.param.removeprefix('session.')}" if error.param else None
            return refusal(400, error.code or "invalid_value", error.message, where)
        minted = await self._secrets.mint(session, asked.expires_after.seconds)
        shown = settings.describe().model_dump(mode="json", exclude_none=True)
        return JSONResponse({"value": minted.value, "expires_at": minted.expires_at, "session": shown})
