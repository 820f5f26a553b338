"""The sglang_version tag: from /server_info (SGLang 0.5.23's own field), else from the
server's Python, never a silent "unknown" when either answers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lab.tracking.versions import sglang_version, version_tags

FX = Path(__file__).parent / "fixtures"


def test_version_from_server_info_fixture():
    # tests/fixtures/server_info_eagle3_c1_after.json: /server_info of SGLang 0.5.23, whose
    # http_server.py server_info() adds "version": __version__
    info = json.loads((FX / "server_info_eagle3_c1_after.json").read_text())
    assert sglang_version(info) == "0.5.23"
    assert version_tags("sglang", info) == {"sglang_version": "0.5.23"}


def test_version_from_the_servers_python_when_server_info_lacks_it(tmp_path, monkeypatch):
    pkg = tmp_path / "sglang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('__version__ = "0.5.99rc1"\n')
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert sglang_version({"tp_size": 8}, python=sys.executable) == "0.5.99rc1"
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "nothing-here"))
    assert sglang_version({}, python=sys.executable) == "unknown"
    assert sglang_version(None, python=str(tmp_path / "no-such-python")) == "unknown"


def test_emulator_runs_are_tagged_emulator_with_the_format_version_beside():
    assert version_tags("emulator", {"version": "0.5.23"}) == {"sglang_version": "emulator",
                                                               "emulated_sglang_version": "0.5.23"}
