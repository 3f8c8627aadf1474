"""The ending the shims before a confined command share: one interpreter for the chain.

A confined command starts behind up to three shims, each ``python -I -S -c CODE ARGS…
NEXT…`` run by the host's Python that does one thing and then executes NEXT: the
pane's (its controlling terminal, ``pane.py``), the overlay's mount (``layers.py``),
the limits' (``confine.py``; last, as it waits for its pids cgroup, then executes
bwrap). ``FOLD`` defines ``is_shim`` and ``run_shim`` for a shim's code: when NEXT is
itself such a shim of the same interpreter, ``run_shim`` runs its code in this process
(``sys.argv`` as a new interpreter would set it, a namespace of its own) instead of
starting another interpreter; anything else is executed as before. What each shim does
and in which order is unchanged (a shim ends by executing what follows it, and ``-I
-S`` hold for the folded code too); a failure in a folded shim ends the process as it
ended the shim's own.

Deliberately not here: what any shim does.
"""

from __future__ import annotations

__all__ = ["FOLD"]

FOLD = """\
def is_shim(argv):
    return len(argv) > 4 and argv[0] == sys.executable and argv[1:4] == ["-I", "-S", "-c"]
def run_shim(argv):
    sys.argv = ["-c", *argv[5:]]
    exec(argv[4], {"__name__": "__main__"})
    sys.exit(0)  # a shim ends by executing what follows it
"""
