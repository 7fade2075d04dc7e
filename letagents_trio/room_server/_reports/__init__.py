"""What agents report beyond chat: their visible reasoning and their workspace captures."""
