"""Which host environment variables a guest may see.

`--env-inherit` (`Host.run(inherit_env=True)`) hands the guest the operator's
environment, and the guest is untrusted: a developer's or CI runner's
environment holds tokens for everything (GitHub, npm, cloud accounts, other
model vendors), not only the backend's key. So inheriting passes everything
*except* what looks like a credential, by name or by value. The one way to
give the guest a denied variable from the host is to name it: `--env NAME`
(`env={"NAME": None}`), one name at a time. A backend's own key variable is
refused even then (SecretEnvError): spearpy's promise is that the guest never
gets the key from the host, and an operator who really wants the guest to
hold a key types it out (`--env NAME=VALUE`).

Pure functions over a mapping, so the rules are tested without a guest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache

from spearpy.errors import SpearpyError

__all__ = ["ANTHROPIC_KEY_ENV", "BUILTIN_KEY_ENVS", "OPENAI_KEY_ENV", "REALTIME_KEY_ENV",
           "SecretEnvError",
           "guest_env", "inheritable_env", "is_secret_name", "is_secret_value",
           "passed_through"]

# The key variables of the built-in backend kinds (the one place they are
# named): refused like a configured key variable even when no backend of
# that kind is configured, and redacted everywhere.
OPENAI_KEY_ENV = "OPENAI_API_KEY"
# The variable SPEAR's mic_rtasr sample tells its users to set: the realtime
# (rtasr) key when nothing else names one.
REALTIME_KEY_ENV = "OPENAI_REALTIME_API_KEY"
ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
BUILTIN_KEY_ENVS = (OPENAI_KEY_ENV, ANTHROPIC_KEY_ENV)

# Whole words of a name (split at non-alphanumerics and camelCase humps).
_WORDS = frozenset({
    "TOKEN", "TOKENS", "KEY", "KEYS", "APIKEY", "APIKEYS", "PAT", "PASS", "AUTH", "DSN",
    "CREDS", "CREDENTIAL", "CREDENTIALS", "SECRET", "SECRETS", "COOKIE", "COOKIES",
})
# Anywhere in the name once separators are dropped (PGPASSWORD, CLIENTSECRET).
_PARTS = ("SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY", "PRIVATEKEY",
          "ACCESSKEY", "AUTHTOKEN", "ACCESSTOKEN", "WEBHOOK", "CONNECTIONSTRING")
# Whole families: every AWS_* / AZURE_* variable configures or holds credentials.
_PREFIXES = ("AWS_", "AZURE_", "OP_SESSION_")
# Sockets and caches that grant access without holding a secret themselves.
_NAMES = frozenset({"SSH_AUTH_SOCK", "GPG_AGENT_INFO", "KRB5CCNAME", "BW_SESSION",
                    "GOOGLE_APPLICATION_CREDENTIALS"})
_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

# Values that are credentials whatever their variable is called. Compiled at
# first use (~0.5 ms): only --env-inherit and MCP records ask, and every
# `spearpy run` imports this module.
_VALUE_PATTERNS = "|".join((
    r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:[^\s/@]*@",  # user:password@ in a URL (DSNs, proxies)
    r"\bsk-[A-Za-z0-9_-]{16,}",  # OpenAI, Anthropic (sk-ant-) and their imitators
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",  # GitHub
    r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",  # Slack
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bhf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"\bnpm_[A-Za-z0-9]{36}\b",  # npm
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    r"(?i:\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,})",
))
# Shorter key values are not searched for inside other values: a two-letter
# dummy key in a test would otherwise hide every variable containing it.
_MIN_KEY_LEN = 8


class SecretEnvError(SpearpyError, ValueError):
    """A variable was asked for by name that the guest may not get from the host."""


def is_secret_name(name: str) -> bool:
    """True if `name` is on the deny-list of credential-like variable names."""
    upper = name.upper()
    if upper in _NAMES or upper.startswith(_PREFIXES):
        return True
    words = [w.upper() for w in _SPLIT.split(name) if w]
    # MYSQL_PWD is a password; PWD alone is the working directory.
    if _WORDS.intersection(words) or "PWD" in words[1:]:
        return True
    compact = "".join(words)
    return any(part in compact for part in _PARTS)


@cache
def _values() -> re.Pattern[str]:
    return re.compile(_VALUE_PATTERNS)


def is_secret_value(value: str) -> bool:
    """True if `value` has the shape of a credential (see _VALUE_PATTERNS)."""
    return _values().search(value) is not None


def _key_names(key_envs: Iterable[str]) -> set[str]:
    return {name for name in (*key_envs, *BUILTIN_KEY_ENVS) if name}


def _key_values(environ: Mapping[str, str], keys: set[str]) -> dict[str, str]:
    """value -> the key variable holding it, for keys long enough to search for."""
    return {value: name for name in sorted(keys)
            if len(value := environ.get(name, "")) >= _MIN_KEY_LEN}


def inheritable_env(environ: Mapping[str, str], allow: Iterable[str] = (),
                    extra_deny: Iterable[str] = ()) -> dict[str, str]:
    """`environ` minus every variable whose name or value looks like a
    credential, minus the key variables `extra_deny` (the backends' own,
    besides BUILTIN_KEY_ENVS) and any variable holding one of their values.
    Names in `allow` are kept although they look like credentials; asking for
    a key variable that way raises SecretEnvError."""
    keys = _key_names(extra_deny)
    allowed = passed_through(environ, allow, keys)
    values = _key_values(environ, keys)
    kept = {name: value for name, value in environ.items()
            if name not in keys and not is_secret_name(name) and not is_secret_value(value)
            and not any(v in value for v in values)}
    kept.update(allowed)
    return kept


def passed_through(environ: Mapping[str, str], names: Iterable[str],
                   extra_deny: Iterable[str] = ()) -> dict[str, str]:
    """The host's values of `names` (those that are set), deny-list or not;
    SecretEnvError for a key variable or a variable holding a key's value."""
    keys = _key_names(extra_deny)
    by_value = _key_values(environ, keys)
    picked: dict[str, str] = {}
    for name in names:
        if name in keys:
            raise SecretEnvError(
                f"{name} is refused: it holds a backend's API key, which the guest never gets "
                f"from the host environment (to give the guest a key, set one: {name}=VALUE)")
        value = environ.get(name)
        if value is None:
            continue  # unset on the host: unset in the guest, as with docker run -e NAME
        holder = next((k for v, k in by_value.items() if v in value), None)
        if holder is not None:
            raise SecretEnvError(
                f"{name} is refused: its value holds the API key in {holder}, which the guest "
                f"never gets from the host environment (to give the guest a key, set one: "
                f"{name}=VALUE)")
        picked[name] = value
    return picked


def guest_env(environ: Mapping[str, str], env: Mapping[str, str | None] | None, *,
              inherit: bool, extra_deny: Iterable[str] = ()) -> dict[str, str]:
    """A run's whole environment: inherited (`inherit`), then `env`, where a
    None value passes that variable through from `environ` and a string sets it."""
    given = dict(env or {})
    names = [name for name, value in given.items() if value is None]
    result = (inheritable_env(environ, names, extra_deny) if inherit
              else passed_through(environ, names, extra_deny))
    result.update({name: value for name, value in given.items() if value is not None})
    return result
