"""Agent sessions: registration and naming, presence, liveness, and the process
connections (SSE streams and WebSockets)."""
