"""``gc_paused`` keeps automatic collection off while a day's rows are alive, also when a
library turns the collector back on meanwhile (spaCy's srsly does, reading a model's msgpack)."""

import gc

import srsly

from pipelines.collector import gc_paused


def _collections_while(work) -> list[int]:
    seen: list[int] = []

    def callback(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(callback)
    try:
        work()
    finally:
        gc.callbacks.remove(callback)
    return seen


def _cycles() -> None:
    for _ in range(50_000):  # 50,000 allocations: many times the youngest generation's threshold
        a: list = []
        a.append(a)


def test_no_collection_while_paused_even_after_a_library_enables_the_collector():
    before = gc.get_threshold()
    assert gc.isenabled()
    assert _collections_while(_cycles), "the test's allocations trigger collections when not paused"

    def paused():
        with gc_paused():
            srsly.msgpack_loads(srsly.msgpack_dumps({"model": "weights"}))  # calls gc.enable()
            assert gc.isenabled()
            _cycles()

    assert _collections_while(paused) == []
    assert gc.get_threshold() == before and gc.isenabled()


def test_a_nested_pause_leaves_the_outer_one_in_force():
    with gc_paused():
        with gc_paused():
            pass
        assert _collections_while(_cycles) == []
    assert gc.isenabled() and gc.get_threshold()[0] > 0
