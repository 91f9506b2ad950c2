"""The user's settings file, ~/.config/ctda-sql/config.toml ($XDG_CONFIG_HOME honoured,
$CTDA_CONFIG names another file), as litecli has:

    database = "~/traces/warehouse.duckdb"   # default for --db (after $CTDA_DB)
    format = "table"         # query/report --format, and the shell's first .mode
    max_width = 0            # widest table (0: no limit); default: the terminal's width
    max_rows = 40            # rows a table shows
    timer = true             # the shell's .timer
    pager = "less -SR"       # for results taller than the terminal
    history_file = "~/.ctda_sql_history"
    key_bindings = "vi"      # or "emacs" (the default)

Command-line options and environment variables win over the file. A $CTDA_CONFIG that names
no file is an error, not an empty settings file: the settings asked for would be ignored."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from ctda_sql.core.errors import CtdaError

# the output formats (rendered by ctda_sql.cli.output); the file's `format` names one
FORMATS = ("table", "csv", "tsv", "json", "jsonlines", "markdown", "line", "list", "html", "insert")

CONFIG_ENV = "CTDA_CONFIG"
KEY_BINDINGS = ("emacs", "vi")
_KINDS = {str: "text in quotes", int: "a whole number", bool: "true or false"}


@dataclass(frozen=True)
class Config:
    database: str | None = None
    format: str | None = None
    max_width: int | None = None
    max_rows: int | None = None
    timer: bool = False
    pager: str | None = None
    history_file: str | None = None
    key_bindings: str = "emacs"


def config_path() -> Path:
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "ctda-sql" / "config.toml"


@lru_cache(maxsize=None)
def _load(path: Path) -> Config:
    if not path.exists():
        return Config()
    import tomllib

    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
        raise CtdaError(f"{path}: cannot read the settings ({exc})") from None
    return _checked(path, values)


def load_config() -> Config:
    """The settings file's values over the defaults; a bad file, or a $CTDA_CONFIG naming
    none, is a CtdaError naming it."""
    path = config_path()
    if os.environ.get(CONFIG_ENV) and not path.exists():
        raise CtdaError(f"${CONFIG_ENV} names {path}, which does not exist; "
                        f"create it, or unset ${CONFIG_ENV} for the default settings file")
    return _load(path)


def _checked(path: Path, values: dict) -> Config:
    known = {f.name: f for f in fields(Config)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise CtdaError(f"{path}: unknown setting {unknown[0]!r}; known: {', '.join(known)}")
    expected = {"database": str, "format": str, "max_width": int, "max_rows": int, "timer": bool,
                "pager": str, "history_file": str, "key_bindings": str}
    for key, value in values.items():
        if not isinstance(value, expected[key]) or (expected[key] is int and isinstance(value, bool)):
            raise CtdaError(f"{path}: {key} must be {_KINDS[expected[key]]}, got {value!r}")
    if values.get("format") not in (None, *FORMATS):
        raise CtdaError(f"{path}: format must be one of {', '.join(FORMATS)}")
    if values.get("key_bindings", "emacs") not in KEY_BINDINGS:
        raise CtdaError(f"{path}: key_bindings must be emacs or vi")
    for key in ("max_width", "max_rows"):
        if values.get(key, 0) < 0:
            raise CtdaError(f"{path}: {key} must be 0 or more")
    return Config(**values)
