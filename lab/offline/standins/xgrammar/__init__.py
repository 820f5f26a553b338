"""Import-time stand-in for xgrammar (bundled by lab.offline, not the real package).

SGLang 0.5.16 imports ``xgrammar.StructuralTag`` at module import; the real package is only used
for constrained decoding, which the lab's node bundle does not support: serve with
``--grammar-backend none`` (the preflight row ``bundle`` checks it). Copied from the recipe in
``shared/real-sglang/bundle.sh``.
"""

from pydantic import BaseModel, ConfigDict


class StructuralTag(BaseModel):
    """Accepts any fields; never used for decoding."""

    model_config = ConfigDict(extra="allow")


def get_model_structural_tag(*args, **kwargs):
    """Constrained decoding is not available with the stand-in."""
    raise ImportError("xgrammar stand-in (lab.offline bundle): serve with --grammar-backend none")
