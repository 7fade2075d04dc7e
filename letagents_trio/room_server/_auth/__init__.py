"""Who is asking: accounts and their tokens, owner tokens, device sign-in."""
