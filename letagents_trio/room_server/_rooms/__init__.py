"""Finding and entering rooms: invite rooms, joining by name or code."""
