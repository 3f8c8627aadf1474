"""``promoter run``'s workflow, apart from its command line.

``status`` (a step's states and their transition table), ``state`` (``Run``: one save
per move),
``flow`` (one step: grant, command, bundle, review, preflight, promotion; ``Outcome``),
``person`` (what the workflow shows and asks, as a protocol the CLI implements),
``answers`` (preconditions, the agent's bundle, a drift refusal), ``drift`` (the merge
offered for a file the person saved during the run), ``merged`` (which promotion a
refused step became through merges), ``links`` (a link the grant's
policy refuses, the rest without it) and ``where`` (the directory the command starts
in: the person's, or the root and why). Nothing here prints or reads a terminal.
"""
