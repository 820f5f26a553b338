"""The sglang_version tag: from /server_info (SGLang 0.5.23's own field); emulator runs say so.
The fallback to the server's Python is tests/component/test_versions_live.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from lab.tracking.versions import sglang_version, version_tags

FX = Path(__file__).resolve().parents[1] / "fixtures"


def test_version_from_server_info_fixture():
    # tests/fixtures/server_info_eagle3_c1_after.json: /server_info of SGLang 0.5.23, whose
    # http_server.py server_info() adds "version": __version__
    info = json.loads((FX / "server_info_eagle3_c1_after.json").read_text())
    assert sglang_version(info) == "0.5.23"
    assert version_tags("sglang", info) == {"sglang_version": "0.5.23"}


def test_emulator_runs_are_tagged_emulator_with_the_format_version_beside():
    assert version_tags("emulator", {"version": "0.5.23"}) == {"sglang_version": "emulator",
                                                               "emulated_sglang_version": "0.5.23"}
