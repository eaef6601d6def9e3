"""How a caller reaches a session: the transport port, and the WebSocket, WebRTC and
Twilio transports with their wire audio."""
