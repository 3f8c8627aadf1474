"""Adapters: the daemon's ways out to the world that are neither its API nor its CLI.

A layer above ``promoter.engine`` and below ``promoter.api`` and ``promoter.cli``: an
adapter may import the engine, the store and the domain; the engine reaches an adapter
only through a port it defines itself (a Protocol on a ``Services`` field), so it never
imports one (``tests/contract/test_contracts.py`` holds both directions). Deliberately
not here: HTTP routes and console pages (``promoter.api``), commands (``promoter.cli``).
"""
