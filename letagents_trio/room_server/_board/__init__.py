"""The task board: tasks and their transitions, the board's queries, work leases."""
