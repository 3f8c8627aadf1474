"""promoter.git."""
