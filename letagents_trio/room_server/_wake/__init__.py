"""Wake rules: what agents wait for, kept and fired by the room."""
