"""Kafka's ``sasl.jaas.config`` text: ``<LoginModule class> <flag> key="value" ... ;``.

Only what the broker side reads from it: the module's options (PLAIN's ``user_<name>="password"``
entries, OAUTHBEARER's ``unsecuredValidator*`` options).
"""

from __future__ import annotations

import dataclasses
import re

from reference_broker.config import ConfigError

_FLAGS = ("required", "requisite", "sufficient", "optional")
_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')


@dataclasses.dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str]


def parse_jaas(setting: str, text: str) -> JaasEntry:
    """One login module entry; ``ConfigError`` naming ``setting`` for anything else."""
    body = text.strip()
    if not body.endswith(";"):
        raise ConfigError(f"{setting}: a JAAS entry must end with ';'")
    body = body[:-1].strip()
    parts = body.split(None, 2)
    if len(parts) < 2 or parts[1].lower() not in _FLAGS:
        raise ConfigError(f"{setting}: expected '<LoginModule class> required key=\"value\" ...;'")
    module, flag = parts[0], parts[1].lower()
    rest = parts[2] if len(parts) > 2 else ""
    options: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        if rest[pos:].strip() == "":
            break
        match = _OPTION.match(rest, pos)
        if match is None:
            raise ConfigError(f"{setting}: cannot read the JAAS options at {rest[pos : pos + 30]!r}")
        key, value = match.group(1), match.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[key] = value
        pos = match.end()
    return JaasEntry(module, flag, options)
