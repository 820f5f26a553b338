"""lab.engine.preflight, the checks that need no process: weights found in the Hugging Face
cache or a local directory, and the NVIDIA driver (R580 or newer). The rest of preflight and
``lab doctor`` is tests/component/test_preflight.py.
"""

from __future__ import annotations

from lab.engine.preflight import FAIL, OK, SKIP, weights_check

def test_weights_in_hf_cache_and_local(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    snap = cache / "models--org--draft" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert weights_check("draft", "org/draft").status == OK
    missing = weights_check("model", "org/other")
    assert missing.status == FAIL and "hf download org/other" in missing.fix
    local = tmp_path / "local-model"
    local.mkdir()
    assert weights_check("model", str(local)).status == FAIL  # no config.json
    (local / "config.json").write_text("{}")
    assert weights_check("model", str(local)).status == OK
    assert weights_check("model", str(tmp_path / "nope")).status == FAIL


def test_driver_check_needs_r580():
    from lab.engine.preflight import driver_check

    assert driver_check("580.65.06").status == OK
    old = driver_check("550.127.05")
    assert old.status == FAIL and "R580" in old.fix and "CUDA 13" in old.detail
    assert driver_check(None).status == SKIP
