"""promoter.fs."""
