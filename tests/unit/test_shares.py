"""``fs.shares``: work a few at once, and the earliest failure as a loop would have met it.

Every item before the earliest failed one was done and succeeded, whatever the shares'
timing; the failure raised is that item's own error; a single item or a single worker
runs in the calling thread, in order, and stops at its first failure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from promoter.fs.shares import first_failure, in_shares


class Boom(Exception):
    pass


def _work(fail: set[int], done: list[int], threads: set[str]) -> Callable[[int], None]:
    lock = threading.Lock()

    def work(item: int) -> None:
        with lock:
            threads.add(threading.current_thread().name)
        if item in fail:
            raise Boom(item)
        with lock:
            done.append(item)

    return work


@pytest.mark.parametrize("workers", [1, 3, 16])
@pytest.mark.parametrize("fail", [set(), {7}, {2, 9}, {0}, {39}, {5, 6, 7}])
def test_every_item_before_the_earliest_failure_is_done_and_its_error_is_returned(
    workers: int, fail: set[int]
) -> None:
    items = list(range(40))
    done: list[int] = []
    threads: set[str] = set()
    work = _work(fail, done, threads)
    failed = first_failure(items, work, workers=workers, name="test-share")
    if not fail:
        assert failed is None
        assert sorted(done) == items
        return
    assert failed is not None
    index, error = failed
    assert index == min(fail)
    assert isinstance(error, Boom) and error.args == (min(fail),)
    assert set(range(index)) <= set(done)
    assert not fail & set(done)
    if workers == 1:
        assert done == list(range(index))  # in order, stopped at the first failure
        assert threads == {threading.current_thread().name}
    else:
        assert threads <= {f"test-share_{n}" for n in range(workers)}


def test_in_shares_raises_the_earliest_failed_items_own_error() -> None:
    done: list[int] = []
    with pytest.raises(Boom) as info:
        in_shares(list(range(20)), _work({4, 13}, done, set()), workers=4)
    assert info.value.args == (4,)
    assert set(range(4)) <= set(done)


def test_a_single_item_runs_in_the_calling_thread() -> None:
    threads: set[str] = set()
    in_shares([1], _work(set(), [], threads), workers=16)
    assert threads == {threading.current_thread().name}


def test_a_callers_pool_is_used_and_left_running() -> None:
    done: list[int] = []
    threads: set[str] = set()
    with ThreadPoolExecutor(4, "kept") as pool:
        for _ in range(3):
            assert (
                first_failure(list(range(8)), _work(set(), done, threads), workers=4, pool=pool)
                is None
            )
        assert sorted(done) == sorted(list(range(8)) * 3)
        assert threads <= {f"kept_{n}" for n in range(4)}
        assert pool.submit(lambda: 7).result() == 7  # still running: the caller shuts it
