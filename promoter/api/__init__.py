"""promoter.api."""
