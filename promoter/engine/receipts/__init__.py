"""Receipts: signing, in-toto statements, the keyring, chains, and a checkout held against one.

Not here: deciding what an operation did; that is ``engine.operation``.
"""
