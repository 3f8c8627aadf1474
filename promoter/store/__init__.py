"""promoter.store."""
