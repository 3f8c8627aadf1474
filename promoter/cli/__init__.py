"""promoter.cli."""
