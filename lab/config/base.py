"""The base of every ``params.yaml`` section model: strict (an unknown key is an error) and
validated on assignment too, so a section changed in code is checked like one read from the file."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Strict"]


class Strict(BaseModel):
    """A ``params.yaml`` section: unknown keys forbidden, assignments validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
