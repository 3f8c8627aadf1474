"""promoter's benchmarks: ``python -m bench.run`` (``make bench``) runs them all and reports."""
