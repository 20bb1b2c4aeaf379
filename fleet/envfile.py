"""Environment files (`KEY=value` lines), read the way systemd's EnvironmentFile= reads them.

The same file serves supervisord's programs (through `fleetctl exec-env`), a systemd unit and
`docker run --env-file` as long as values are left unquoted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fleet.errors import ConfigError

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "$": "$", "`": "`"}


def parse_env(text: str, source: str = "env file") -> dict[str, str]:
    """The variables of an environment file; raises ConfigError naming the first bad line.

    Blank lines and lines starting with `#` or `;` are ignored, `export ` is allowed before a name.
    An unquoted value is taken as written (surrounding blanks removed, no comment after it); a value in
    single quotes is literal, one in double quotes understands backslash escapes.
    """
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, eq, value = line.partition("=")
        key = key.strip()
        if not eq or not _KEY.fullmatch(key):
            raise ConfigError(f"{source}, line {number}: expected NAME=value")
        env[key] = _value(value.strip(), f"{source}, line {number}")
    return env


def _value(value: str, where: str) -> str:
    if len(value) < 1 or value[0] not in "'\"":
        return value
    quote = value[0]
    if len(value) < 2 or value[-1] != quote:
        raise ConfigError(f"{where}: unterminated {quote} quote (values cannot span lines)")
    body = value[1:-1]
    if quote == "'":
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            out.append(_ESCAPES.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def render_env(env: Mapping[str, str]) -> str:
    """An environment file holding `env`, values quoted only where needed."""
    lines = []
    for key, value in env.items():
        if not _KEY.fullmatch(key):
            raise ConfigError(f"invalid environment variable name {key!r}")
        if "\n" in value or "\r" in value:
            raise ConfigError(f"{key}: a value cannot span lines")
        plain = value == value.strip() and not value.startswith(("'", '"'))
        lines.append(f"{key}={value}" if plain else f"{key}='{value}'" if "'" not in value else
                     f'{key}="' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "".join(line + "\n" for line in lines)
