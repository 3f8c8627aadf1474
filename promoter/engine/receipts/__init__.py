"""Receipts: signing, in-toto statements, chains, and a checkout held against one.

Not here: deciding what an operation did, and serving an operation's receipt; that is
``engine.operation``. The key files are ``promoter.store.keyring``.
"""
