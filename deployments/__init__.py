"""Ray Serve shells around the handlers, and the OpenAI Realtime ingress that joins them."""
