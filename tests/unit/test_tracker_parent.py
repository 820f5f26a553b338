"""One ``dvc repro`` has one parent run: a transient store failure while a later stage looks
up the recorded parent (a busy SQLite store says ``database is locked``) is retried, not taken
for a missing parent (which made a second parent and split the pipeline's runs in CI); a parent
the store does not have any more still gets a new one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lab.tracking.grouping import remember_parent
from lab.tracking.runs import TrackingError
from lab.tracking.tracker import Tracker


class _Missing(Exception):
    error_code = "RESOURCE_DOES_NOT_EXIST"


class _Client:
    """get_run fails ``fail`` times with ``exc``, then answers; create_run counts the new runs."""

    def __init__(self, key: str, fail: int = 0, exc: Exception | None = None):
        self.key, self.fail, self.exc, self.created = key, fail, exc, []

    def get_run(self, run_id):
        if self.fail:
            self.fail -= 1
            raise self.exc
        return SimpleNamespace(info=SimpleNamespace(lifecycle_stage="active"),
                               data=SimpleNamespace(tags={"pipeline_key": self.key}))

    def get_experiment_by_name(self, name):
        return SimpleNamespace(experiment_id="1")

    def create_run(self, exp_id, tags, run_name, start_time):
        self.created.append(run_name)
        return SimpleNamespace(info=SimpleNamespace(run_id=f"new{len(self.created)}"))


def _tracker(tmp_path, client) -> Tracker:
    t = Tracker("sqlite:///x.db", "exp", root=tmp_path, key="k1", base_tags={}, engine="emulator")
    t._client = client
    remember_parent(tmp_path, "k1", "recorded")
    return t


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch):
    monkeypatch.setattr("lab.tracking.tracker.time.sleep", lambda s: None)
    monkeypatch.delenv("LAB_MLFLOW_PARENT_RUN_ID", raising=False)
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    monkeypatch.setattr("lab.tracking.tracker.git_commit", lambda root=None: "0123456789abcdef")


def test_a_locked_store_is_retried_and_the_recorded_parent_kept(tmp_path):
    client = _Client("k1", fail=2, exc=RuntimeError("(sqlite3.OperationalError) database is locked"))
    assert _tracker(tmp_path, client).parent_run_id() == "recorded"
    assert client.created == []


def test_a_store_that_keeps_failing_raises_instead_of_making_a_second_parent(tmp_path):
    client = _Client("k1", fail=99, exc=RuntimeError("database is locked"))
    with pytest.raises(TrackingError, match="parent run.*database is locked"):
        _tracker(tmp_path, client).parent_run_id()
    assert client.created == []


def test_a_parent_the_store_lost_gets_a_new_one(tmp_path):
    client = _Client("k1", fail=1, exc=_Missing("Run 'recorded' not found"))
    assert _tracker(tmp_path, client).parent_run_id() == "new1"
    assert len(client.created) == 1
