"""The load-test client and harness: Realtime, WebRTC and Twilio callers, what each session heard, the report."""
