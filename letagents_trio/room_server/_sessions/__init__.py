"""Agent sessions: registration and naming, presence, and the held process streams."""
