"""A pytest plugin that prints where a run's CPU time goes: collection, each file and the
largest tests, in process time (user + sys of the pytest process, children not included), so
a busy machine's other work does not inflate the figures the way wall time (``--durations``)
does. Not loaded by default; docs/testing.md's unit-tier figures come from::

    PYTHONPATH=tests .venv/bin/pytest -q tests/unit -p no:cacheprovider -p cpu_times
"""

from __future__ import annotations

import collections
import time

import pytest

_per_test: dict[str, float] = collections.defaultdict(float)
_collection = [0.0, 0.0]  # start, length


def pytest_collection(session):
    _collection[0] = time.process_time()


def pytest_collection_finish(session):
    _collection[1] = time.process_time() - _collection[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.process_time()
    try:
        return (yield)
    finally:
        _per_test[item.nodeid] += time.process_time() - start


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    per_file: dict[str, float] = collections.defaultdict(float)
    for nodeid, s in _per_test.items():
        per_file[nodeid.split("::")[0]] += s
    small = [s for s in _per_test.values() if s < 0.3]
    write(f"CPU s: process {time.process_time():.1f}, collection {_collection[1]:.1f}, tests "
          f"{sum(_per_test.values()):.1f} ({len(small)} tests under 0.3 s: {sum(small):.1f})")
    write("CPU s per file (largest 15):")
    for name, s in sorted(per_file.items(), key=lambda kv: -kv[1])[:15]:
        write(f"  {s:6.2f}  {name}")
    write("CPU s per test (largest 15; setup and teardown included):")
    for nodeid, s in sorted(_per_test.items(), key=lambda kv: -kv[1])[:15]:
        write(f"  {s:6.2f}  {nodeid}")
