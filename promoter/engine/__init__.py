"""promoter.engine."""
