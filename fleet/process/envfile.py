"""Environment files (`KEY=value` lines), read the way systemd's EnvironmentFile= reads them.

The same file serves supervisord's programs (through `fleetctl exec-env`), a systemd unit and
`docker run --env-file` as long as values are left unquoted.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

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
            line = line[len("export ") :].lstrip()
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
        lines.append(
            f"{key}={value}"
            if plain
            else f"{key}='{value}'"
            if "'" not in value
            else f'{key}="' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        )
    return "".join(line + "\n" for line in lines)


# What an environment file may set without being named: fleet's own settings, the OpenTelemetry
# SDK's and libpq's. Anything else (LD_PRELOAD, PYTHONPATH, PATH, an application's own secret) must
# be named by the operator, so that whoever can write the file cannot choose what code runs.
ALLOWED_BY_DEFAULT = ("FLEET_*", "OTEL_*", "PG*")
# fleet's own settings that choose code a worker runs (the modules it imports, the commands it
# declares): refused like the others unless the operator names them.
CODE_SETTINGS = ("FLEET_APP", "FLEET_JOBS_FILE")


def read_env_file(path: Path, allow: Iterable[str] = ()) -> tuple[dict[str, str], list[str]]:
    """The variables of the environment file at `path` and the warnings to print.

    Refused (ConfigError naming the file, its directory or the variable), since whoever could write
    the file would choose what the processes run: a file that others than its owner may write, or
    that another user owns (only this user or root may), in a directory that another user owns or
    that others may write (unless sticky, as /tmp is: then none may replace another's file); a
    variable that matches neither ALLOWED_BY_DEFAULT nor a pattern of `allow` (shell-style, e.g.
    `APP_*`), or one of CODE_SETTINGS that no pattern of `allow` matches. Warned: a file that
    anyone may read (it usually holds the database password), as libpq warns of a `.pgpass`.
    """
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it: {e.strerror}") from None
    mode = st.st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"{path}: writable by group or others (mode {stat.S_IMODE(mode):04o}); "
            f"run `chmod go-w {path}` (0600 or 0640 with a group that only reads)"
        )
    euid = os.geteuid()
    if st.st_uid not in (euid, 0):
        raise ConfigError(
            f"{path}: owned by uid {st.st_uid}, neither this user (uid {euid}) nor root; "
            "whoever owns it chooses what the processes run"
        )
    for directory in dict.fromkeys((path.absolute().parent, path.resolve().parent)):
        _check_directory(directory, euid)
    warnings = []
    if mode & stat.S_IROTH:
        warnings.append(
            f"{path}: readable by anyone (mode {stat.S_IMODE(mode):04o}) and may hold a password; "
            f"run `chmod o-r {path}`"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from None
    env = parse_env(text, str(path))
    patterns = (*ALLOWED_BY_DEFAULT, *allow)
    for key in env:
        named = any(fnmatch.fnmatchcase(key, pattern) for pattern in allow)
        if key in CODE_SETTINGS and not named:
            raise ConfigError(
                f"{path}: {key} is not allowed in an environment file unless --env-allow "
                "(exec-env --allow) names it: it chooses the code a worker runs (give it as a flag)"
            )
        if not named and not any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns):
            raise ConfigError(
                f"{path}: {key} is not allowed in an environment file (allowed: "
                f"{', '.join(ALLOWED_BY_DEFAULT)} but {', '.join(CODE_SETTINGS)}, and what --env-allow "
                "(exec-env --allow) names)"
            )
    return env, warnings


def _check_directory(directory: Path, euid: int) -> None:
    """ConfigError unless only this user or root can replace the files of `directory`."""
    try:
        st = os.stat(directory)
    except OSError as e:
        raise ConfigError(f"{directory}: cannot read it: {e.strerror}") from None
    if st.st_uid not in (euid, 0):
        raise ConfigError(
            f"{directory}: owned by uid {st.st_uid}, neither this user (uid {euid}) nor root; "
            "whoever owns it can replace the environment file in it"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise ConfigError(
            f"{directory}: writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}), who "
            f"can replace the environment file in it; run `chmod go-w {directory}`"
        )
