"""Session statements answered by the server itself: ``SET``, ``RESET``, ``SHOW``, ``DISCARD``.

Veil's own settings are ``veil.epsilon`` (ε per query), ``veil.show_ci`` (a 95% CI column after
each numeric column) and ``veil.budget`` (read only); ``statement_timeout`` is honoured as in
PostgreSQL (a number is milliseconds; units ``ms``, ``s``, ``min``, ``h``; 0 turns it off, capped
by the server's ``--statement-timeout``). Any other parameter is remembered for ``SHOW`` and
``current_setting`` and has no effect.

>>> parse_duration("1500")
1.5
>>> parse_duration("2s"), parse_duration("'1min'"), parse_duration("0")
(2.0, 60.0, 0.0)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from pg_mimic import ResultColumn

from veil.errors import InputError, ParseError, UnknownSetting, did_you_mean
from veil.mechanisms.budget import as_epsilon, format_epsilon
from veil.server import catalog, held
from veil.server.results import Result

__all__ = ["SHOW_DEFAULTS", "SessionSettings", "parse_duration", "startup_settings"]

VEIL_SETTINGS = ("epsilon", "show_ci", "budget")
#: A parameter name as PostgreSQL reads it: dotted parts, each bare or double-quoted (`SET "veil.epsilon" = …` is
#: ``veil.epsilon``; red team s36: the quoted spelling was accepted and changed nothing).
_NAME = r'(?:[A-Za-z_][\w$]*|"(?:[^"]|"")+")(?:\s*\.\s*(?:[A-Za-z_][\w$]*|"(?:[^"]|"")+"))*'
_SET_RE = re.compile(rf"^\s*SET\s+(?:SESSION\s+|(LOCAL)\s+)?({_NAME})\s*(?:TO|=)\s*(.+?)\s*$", re.I | re.S)
_RESET_RE = re.compile(rf"^\s*RESET\s+({_NAME})\s*$", re.I)
_NAME_PART_RE = re.compile(r'"((?:[^"]|"")+)"|([A-Za-z_][\w$]*)')
_SHOW_RE = re.compile(r"^\s*SHOW\s+(.+?)\s*$", re.I | re.S)
_BOOL_WORDS = {"on": True, "true": True, "1": True, "yes": True, "off": False, "false": False, "0": False, "no": False}
#: SHOW's multi-word spellings (SQL standard) → the parameter they mean.
_SHOW_ALIASES = {
    "transaction isolation level": "transaction_isolation",
    "time zone": "timezone",
    "session authorization": "session_authorization",
}
SHOW_DEFAULTS = {
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "datestyle": "ISO, MDY",
    "timezone": "UTC",
    "search_path": '"$user", public',
    "standard_conforming_strings": "on",
    "integer_datetimes": "on",
    "transaction_isolation": "read committed",
    "default_transaction_isolation": "read committed",
    "transaction_read_only": "on",
    "default_transaction_read_only": "on",
    "max_identifier_length": "63",
    "is_superuser": "off",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
}
#: Startup-packet keys that belong to the protocol, not to the settings.
_PROTOCOL_KEYS = frozenset({"user", "database", "replication", "options"})
#: One argument of libpq's ``options``: whitespace separates, a backslash escapes the next character.
_OPTION_WORD = re.compile(r"(?:\\.|[^\s\\])+", re.S)
_UNITS = {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([a-z]*)\s*$", re.I)


def setting_name(text: str) -> str:
    """The parameter ``text`` names (matched by ``_NAME``): quoted parts as written, bare ones folded, then the whole
    in lower case, as PostgreSQL looks parameters up.

    >>> setting_name('"veil.epsilon"'), setting_name('Veil . "EPSILON"'), setting_name("statement_timeout")
    ('veil.epsilon', 'veil.epsilon', 'statement_timeout')
    """
    parts = [q.replace('""', '"') if q else b for q, b in _NAME_PART_RE.findall(text)]
    return ".".join(parts).lower()


def parse_duration(text: str) -> float:
    """A PostgreSQL time setting in seconds (a bare number is milliseconds)."""
    match = _DURATION_RE.match(text.strip().strip("'\""))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in ("", *_UNITS):
        raise InputError(
            f"invalid value for a time setting: {text!r}", hint="Give milliseconds (5000) or a unit: '5s', '1min', '250ms'"
        )
    value = float(match.group(1)) * (_UNITS[unit] if unit else 0.001)
    if not math.isfinite(value):
        raise InputError(f"invalid value for a time setting: {text!r}")
    return value


def _settings_hint(name: str) -> str:
    names = [f"veil.{s}" for s in VEIL_SETTINGS]
    return did_you_mean(name, names) or f"Veil's settings: {', '.join(names)}"


def _unknown(name: str) -> UnknownSetting:
    return UnknownSetting(f'unrecognized configuration parameter "{name}"', hint=_settings_hint(name))


def startup_settings(params: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The settings a startup packet asks for that Veil acts on (``veil.*``, ``statement_timeout``), each checked as
    ``SET`` checks it: the packet's own parameters (asyncpg's ``server_settings``, JDBC's ``options``-free ones) and
    libpq's ``options`` (``-c name=value``, ``-cname=value``, ``--name=value``). Any other parameter is left as it
    was. A parameter or option naming Veil that cannot be read is refused, never ignored (red team s46 A2:
    ``options='-c veil.epsilon=0.001'`` logged in and every query was charged the default ε, 500× more).

    >>> startup_settings({"user": "a", "options": "-c veil.epsilon=0.001 --statement-timeout=5s", "TimeZone": "UTC"})
    (('veil.epsilon', '0.001'), ('statement_timeout', '5s'))
    """
    for k, v in params.items():
        if k.lower() in _PROTOCOL_KEYS and k not in _PROTOCOL_KEYS and "veil" in v.lower():
            raise _unknown(k)  # PostgreSQL reads only ``options`` so spelled (red team s48 A5)
    pairs = [(k, v) for k, v in params.items() if k.lower() not in _PROTOCOL_KEYS]
    probe = SessionSettings(values={})
    out: list[tuple[str, str]] = []
    # PostgreSQL applies ``options`` first and the packet's own parameters after them (process_startup_options)
    for key, value in [*_startup_options(params.get("options", "")), *pairs]:
        name = key.strip().lower()
        if name.startswith("veil.") or name == "statement_timeout":
            probe.set(name, value, apply=True)  # the refusals of SET
            out.append((name, value))
        elif "veil" in name:
            raise _unknown(key)
    return tuple(out)


def _startup_options(text: str) -> list[tuple[str, str]]:
    """``(name, value)`` of each ``-c name=value`` / ``--name=value`` in libpq's ``options`` (dashes in a name read as
    underscores, as PostgreSQL does); an argument naming Veil that is not of those forms is refused."""
    words = [re.sub(r"\\(.)", r"\1", w, flags=re.S) for w in _OPTION_WORD.findall(text)]
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word, i = words[i], i + 1
        if word == "-c" and i < len(words):
            arg, i = words[i], i + 1
        elif word.startswith("-c") and len(word) > 2:
            arg = word[2:]
        elif word.startswith("--"):
            arg = word[2:]
        else:
            arg = ""
        name, sep, value = arg.partition("=")
        if sep and name:
            out.append((name.replace("-", "_"), value))
        elif "veil" in word.lower() or "veil" in arg.lower():
            raise ParseError(
                f"cannot read the startup option {word!r}", hint="Write options='-c veil.epsilon=0.1' (or SET it after login)"
            )
    return out


@dataclass
class SessionSettings:
    """One connection's settings. ``values`` is what ``SHOW`` reports for the others."""

    values: dict[str, str]
    epsilon: Fraction | None = None
    show_ci: bool = False
    statement_timeout: float = 0.0  # seconds; 0: the server's limit only
    #: name → (its typed value, its SHOW text) before this transaction's first ``SET LOCAL`` of it
    _transaction_local: dict[str, tuple[Any, str | None]] = field(default_factory=dict)
    #: the values given at login: what RESET, RESET ALL and DISCARD ALL go back to (PostgreSQL's reset values)
    login: dict[str, str] = field(default_factory=dict)

    # --- SET / RESET ---------------------------------------------------------------------
    def set_statement(self, sql: str, *, apply: bool, in_transaction: bool = False) -> Result:
        """``SET``; a ``SET LOCAL`` inside a transaction block lasts until :meth:`end_transaction` (red team s46 A3:
        ``BEGIN; SET LOCAL veil.epsilon = 2; COMMIT`` charged 2 for every later query); outside one it holds for the
        session, like ``SET``."""
        match = _SET_RE.match(sql)
        if match:
            name, value = setting_name(match.group(2)), match.group(3).strip().strip("'\"")
            before = self._current(name)
            if value.upper() == "DEFAULT":
                if apply:
                    self.reset(name)
            else:
                self.set(name, value, apply=apply)
            # only once the SET has taken effect: a refused one leaves the transaction's bookkeeping as it was
            if apply and in_transaction and match.group(1):
                self._transaction_local.setdefault(name, before)  # the value before the transaction's first SET LOCAL
            elif apply:
                self._transaction_local.pop(name, None)  # a session SET holds after COMMIT
        elif "veil" in sql.lower():
            # a form this reader does not know must not be taken for one of Veil's settings and then ignored
            raise ParseError(f"cannot read {sql!r} as a setting", hint="Write SET veil.epsilon = 0.1 (or TO 0.1)")
        return Result(None, [], "SET")  # anything else (SET TIME ZONE …) touches nothing: accepted

    def reset_statement(self, sql: str, *, apply: bool) -> Result:
        match = _RESET_RE.match(sql)
        if not match:
            raise ParseError(f"cannot read {sql!r}", hint="Write RESET <name> or RESET ALL")
        if apply:
            name = setting_name(match.group(1))
            self.reset(name)
            if name == "all":
                self._transaction_local.clear()
            else:
                self._transaction_local.pop(name, None)
        return Result(None, [], "RESET")

    def set(self, name: str, value: str, *, apply: bool) -> None:
        if apply:
            held.check_setting(self.values, name, value)  # before anything changes: a refused SET changes nothing
        if name.startswith("veil."):
            key = name[5:]
            if key == "epsilon":
                # the one bounded parser of ε text (red team s21, A1/A2: Fraction("1e-300000") built 10**300000
                # on the event loop; 1e400 was accepted and SHOW then overflowed)
                eps = as_epsilon(value, what="veil.epsilon")
                if apply:
                    self.epsilon = eps
            elif key == "show_ci":
                flag = _BOOL_WORDS.get(value.lower())
                if flag is None:
                    raise InputError(f"veil.show_ci must be on or off, got {value!r}")
                if apply:
                    self.show_ci = flag
            else:
                raise _unknown(name)
        elif name == "statement_timeout":
            seconds = parse_duration(value)
            if apply:
                self.statement_timeout = seconds
        if apply:
            # a name, as PostgreSQL keeps it: its first 63 bytes (held.truncate_name)
            self.values[name] = held.truncate_name(value) if name == "application_name" else value

    def _current(self, name: str) -> tuple[Any, str | None]:
        """``name``'s typed value and SHOW text now (what a ``SET LOCAL`` of it puts back at the transaction's end)."""
        typed = {"veil.epsilon": self.epsilon, "veil.show_ci": self.show_ci, "statement_timeout": self.statement_timeout}
        return typed.get(name), self.values.get(name)

    def snapshot(self) -> tuple[Any, ...]:
        """Everything a ``ROLLBACK TO SAVEPOINT`` puts back."""
        return (self.epsilon, self.show_ci, self.statement_timeout, dict(self.values), dict(self._transaction_local))

    def restore(self, snap: tuple[Any, ...]) -> None:
        self.epsilon, self.show_ci, self.statement_timeout = snap[0], snap[1], snap[2]
        self.values.clear()
        self.values.update(snap[3])
        self._transaction_local = dict(snap[4])

    def end_transaction(self) -> None:
        """``COMMIT``/``ROLLBACK``: each ``SET LOCAL`` of the transaction is undone."""
        for name, (typed, shown) in self._transaction_local.items():
            if name == "veil.epsilon":
                self.epsilon = typed
            elif name == "veil.show_ci":
                self.show_ci = bool(typed)
            elif name == "statement_timeout":
                self.statement_timeout = float(typed or 0.0)
            if shown is None:
                self.values.pop(name, None)
            else:
                self.values[name] = shown
        self._transaction_local.clear()

    def reset(self, name: str) -> None:
        if name == "all":
            self.epsilon, self.show_ci, self.statement_timeout = None, False, 0.0
            self.values.clear()
            self._transaction_local.clear()  # COMMIT puts nothing back over it
            for n, v in self.login.items():
                self.set(n, v, apply=True)
            return
        if name in self.login:
            self.set(name, self.login[name], apply=True)
            return
        if name == "veil.epsilon":
            self.epsilon = None
        elif name == "veil.show_ci":
            self.show_ci = False
        elif name == "statement_timeout":
            self.statement_timeout = 0.0
        elif name.startswith("veil."):
            raise _unknown(name)
        self.values.pop(name, None)

    # --- SHOW ----------------------------------------------------------------------------
    def show_name(self, sql: str) -> str:
        """The parameter a ``SHOW`` statement asks for (lower case)."""
        match = _SHOW_RE.match(sql)
        if not match:
            raise ParseError(f"cannot read {sql!r}", hint="Write SHOW <name>, e.g. SHOW veil.budget")
        words = " ".join(match.group(1).split()).lower()
        name = _SHOW_ALIASES.get(words) or (setting_name(match.group(1)) if re.fullmatch(_NAME, match.group(1)) else words)
        if not re.fullmatch(r"[a-z_][\w.]*", name):
            raise ParseError(f"cannot read {sql!r}", hint="Write SHOW <name>, e.g. SHOW veil.budget")
        return name

    def show(self, name: str, *, default_epsilon: Fraction, server_version: str, budget: Any = None) -> Result:
        if name == "veil.budget":
            row = catalog.budget_row(budget)
            return Result(list(catalog.BUDGET_COLUMNS), [tuple(row.values())], "SHOW")
        if name == "veil.epsilon":
            value = format_epsilon(self.epsilon if self.epsilon is not None else default_epsilon)
        elif name == "veil.show_ci":
            value = "on" if self.show_ci else "off"
        elif name.startswith("veil."):
            raise _unknown(name)
        elif name == "all":
            names = sorted({*SHOW_DEFAULTS, *self.values})
            rows = [(n, self.values.get(n, SHOW_DEFAULTS.get(n, ""))) for n in names]
            return Result([ResultColumn("name", catalog.TEXT), ResultColumn("setting", catalog.TEXT)], rows, "SHOW")
        elif name == "server_version":
            value = server_version
        else:
            value = self.values.get(name, SHOW_DEFAULTS.get(name, ""))
        return Result([ResultColumn(name, catalog.TEXT)], [(value,)], "SHOW")
