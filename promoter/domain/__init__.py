"""promoter.domain."""
