"""The open-file limit of a serving daemon: the soft limit raised towards the hard one.

A blob batch holds one descriptor per blob until it commits (up to ``BATCH_MAX_BLOBS``,
2000: an anonymous temp lives only as long as its descriptor), beside the database, the
worker threads' files and the git processes' pipes. The common default soft limit of
1024 refuses a full batch part-way with ``EMFILE`` (507 ``storage_error``). ``promoter
serve`` calls ``raise_open_files`` just before it serves: the soft limit goes up to the
hard one (at most ``WANTED``), and when it stays below ``NEEDED`` the daemon says so in
its log.

Not here: lowering a limit, the hard limit (only the service manager may raise it:
``LimitNOFILE=`` in ``deploy/``), or a per-request descriptor budget (a daemon left
below ``NEEDED`` still refuses a batch that needs more, as the 507 it was).
"""

from __future__ import annotations

import resource

from promoter.domain.blob_frames import BATCH_MAX_BLOBS

WANTED = 1 << 16
NEEDED = BATCH_MAX_BLOBS + 512  # a full batch, with room for everything else


def raise_open_files(wanted: int = WANTED) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to ``min(hard, wanted)`` when it is lower; the
    soft limit in force afterwards. A refusal (a sandbox forbidding ``setrlimit``)
    leaves the limit as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft
    return target
