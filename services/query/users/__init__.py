"""Users: accounts, erasure."""
