"""Secret redaction for everything the lab logs, records or uploads.

Only credentials are redacted. A name is a credential's when one of its words (split on
``_``, ``-``, ``.`` and lower-to-upper case changes) is ``SECRET``, ``PASSWORD``, ``PASSWD``,
``CREDENTIAL(S)``, ``AUTHORIZATION`` or ``APIKEY``, or when its *last* word is ``TOKEN``,
``KEY`` or ``AUTH`` (``HF_TOKEN``, ``WANDB_API_KEY``, ``AWS_SECRET_ACCESS_KEY``,
``MY_SERVICE_PASSWORD``, ``hfToken``). Names that merely contain those letters are not:
``num_draft_tokens``, ``max_new_tokens``, ``TOKENIZERS_PARALLELISM``, ``verify_tokens`` (the
plural ``TOKENS`` counts tokens, it is no token), and neither is a setting *about* tokens such as
``SGLANG_SIMULATE_ACC_TOKEN_MODE`` (its value is ``real-draft-token``, no credential). Matching values are replaced by ``***`` before they reach a log line, an MLflow
param, an environment capture or an artifact. Argv values that follow a flag whose last
word is such a word (``--api-key X``, ``--hf-token X``) are redacted too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["is_secret_name", "redact_env", "redact_argv", "redact_text", "argv_secrets", "scrub_secrets", "redact_url",
           "REDACTED"]

REDACTED = "***"
#: Words that make a name a credential's (compared lower-case, whole words only).
SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "credential", "credentials", "auth",
                          "authorization", "apikey", "key"})
#: Of those, words that name a credential only as the name's last word (``HF_TOKEN``, not
#: ``SGLANG_SIMULATE_ACC_TOKEN_MODE``).
LAST_WORD_ONLY = frozenset({"token", "key", "auth"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Flags are matched on their last word only: --api-key, --hf-token, but not
# --speculative-num-draft-tokens.
_SECRET_FLAG = re.compile(r"[-_](token|key|secret|password)$", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """True if a variable, parameter or flag name names a credential: one of its words is in
    :data:`SECRET_WORDS` (``HF_TOKEN``, ``server.env.WANDB_API_KEY``, ``--api-key``), not
    merely a substring (``num_draft_tokens``, ``TOKENIZERS_PARALLELISM`` are not)."""
    words = [w.lower() for w in _WORDS.findall(name)]
    if not words:
        return False
    return words[-1] in SECRET_WORDS or any(w in SECRET_WORDS - LAST_WORD_ONLY for w in words)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with secret-named values replaced by ``***``."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def redact_argv(argv: list[str]) -> list[str]:
    """A copy of ``argv`` with the value of a secret flag (``--api-key X``, ``--hf-token=X``) hidden."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("-") and _SECRET_FLAG.search(arg.split("=", 1)[0]):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def redact_text(text: str, env: Mapping[str, str]) -> str:
    """``text`` with the values of secret-named variables of ``env`` replaced by ``***``.

    Values shorter than 4 characters are left alone (they would redact common words).
    """
    for k, v in env.items():
        if is_secret_name(k) and v and len(v) >= 4:
            text = text.replace(v, REDACTED)
    return text


def scrub_secrets(text: str, *envs: Mapping[str, str]) -> str:
    """:func:`redact_text` over the lab's own environment (``os.environ``: a token exported
    in the shell, as docs/gpu-node.md tells users, is inherited by the engine, which may print
    it) and the extra mappings ``envs`` (the engine's added env, :func:`argv_secrets`)."""
    import os

    merged: dict[str, str] = dict(os.environ)
    for env in envs:
        merged.update(env)
    return redact_text(text, merged)


def argv_secrets(argv: list[str]) -> dict[str, str]:
    """``{flag: value}`` for the secret flags of ``argv`` (what :func:`redact_argv` hides),
    shaped like an environment so that :func:`redact_text` can scrub them from a log."""
    out: dict[str, str] = {}
    for arg, shown in zip(argv, redact_argv(argv)):
        if shown.endswith(REDACTED) and arg != shown:
            key = shown[: -len(REDACTED)].rstrip("=") or "ARG_SECRET"
            out[key + "_SECRET"] = arg.split("=", 1)[1] if "=" in arg and arg.startswith("-") else arg
    return out


def redact_url(url: str) -> str:
    """``url`` with the password of its user-info part replaced by ``***`` (other URLs as is)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{REDACTED}@{host}"))
