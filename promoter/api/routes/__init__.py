"""promoter.api.routes."""
