"""The sglang_version tag from the server's Python when /server_info lacks it (a Python process
is started), never a silent "unknown" when it answers.
"""

from __future__ import annotations

import sys

from lab.tracking.versions import sglang_version

def test_version_from_the_servers_python_when_server_info_lacks_it(tmp_path, monkeypatch):
    pkg = tmp_path / "sglang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('__version__ = "0.5.99rc1"\n')
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert sglang_version({"tp_size": 8}, python=sys.executable) == "0.5.99rc1"
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "nothing-here"))
    assert sglang_version({}, python=sys.executable) == "unknown"
    assert sglang_version(None, python=str(tmp_path / "no-such-python")) == "unknown"
