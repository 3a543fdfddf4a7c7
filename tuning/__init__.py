"""Host tuning engine: ordered profiles, dry run, snapshot and exact revert."""
