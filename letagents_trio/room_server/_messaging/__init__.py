"""Messages: posting, reading, long polls, and threads."""
