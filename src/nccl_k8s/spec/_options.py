"""The deploy option registry: what an entry is, and how one is declared on its RunSpec field.

Each deploy option is one entry, written on the RunSpec field it fills (spec/_model.py):

    priority_class: str | None = option(
        "--priority-class", parse=dns_subdomain, metavar="NAME", panel=LIFETIME,
        help="Pod priorityClassName.",
    )

The field's name is the entry's target, the flag its spelling, `parse` its validation (once, at
the edge), and mypy checks that what `parse` returns fits the field's type (`option` returns what
its parser returns). `OPTIONS` (read off RunSpec) drives both `build_run_spec` and the CLI's
options, so a new option is one field plus its use in the renderer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal, TypeVar, cast

OptionKind = Literal["value", "list", "switch"]

T = TypeVar("T")

#: Where an entry sits in its dataclass field's metadata.
OPTION_KEY = "nccl_k8s.option"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Option:
    """One deploy option. `build_run_spec` reads the user's value under `name`, falls back to
    `default` and stores `parse(flag, value)` in the RunSpec field `field`; the CLI derives its
    flag, help, metavar, panel and the default it shows from the same entry."""

    flags: tuple[str, ...]
    """Command-line spellings, long first (`--namespace`, `-n`)."""
    help: str
    panel: str
    """The --help section it is listed in."""
    metavar: str = ""
    """What the value looks like in --help: N, SIZE, DURATION, QUANTITY, KEY=VALUE ..."""
    kind: OptionKind = "value"
    """value: one string; list: repeatable, a list of strings; switch: a flag (bool)."""
    parse: Callable[[str, Any], Any] | None = None
    """(flag, the string typed, or the list of strings of a list option) -> the field's value,
    or UsageError naming the value and the form expected. None for a switch."""
    default: str | None = None
    """The default as a user would type it, parsed like a typed value when the option is absent.
    None: absent means unset, or a default that depends on other options (`default_note`)."""
    default_note: str | None = None
    """What --help says the default is, where `default` alone would not say it all."""
    only_with: tuple[str, str] | None = None
    """(option name, value): the option applies only then (given otherwise: a usage error;
    absent otherwise: the field is None)."""
    field: str = ""
    """The RunSpec field it fills: the field the entry is declared on (`options_of`)."""

    @property
    def name(self) -> str:
        """The long flag as a Python name: keyword of build_run_spec and CLI parameter name."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def flag(self) -> str:
        return self.flags[0]

    @property
    def shown_default(self) -> str | None:
        return self.default_note if self.default_note is not None else self.default


def _declare(entry: Option) -> Any:
    return dataclasses.field(metadata={OPTION_KEY: entry})


def option(
    *flags: str,
    parse: Callable[[str, str], T],
    help: str,
    panel: str,
    metavar: str,
    default: str | None = None,
    default_note: str | None = None,
    only_with: tuple[str, str] | None = None,
) -> T:
    """An option taking one value; declares the RunSpec field it is assigned to."""
    entry = Option(
        flags=flags, parse=parse, help=help, panel=panel, metavar=metavar, default=default,
        default_note=default_note, only_with=only_with,
    )  # fmt: skip
    return cast(T, _declare(entry))


def repeated(
    *flags: str,
    parse: Callable[[str, list[str]], T],
    help: str,
    panel: str,
    metavar: str,
) -> T:
    """A repeatable option: `parse` gets every value given, in order (none: an empty list)."""
    entry = Option(flags=flags, parse=parse, help=help, panel=panel, metavar=metavar, kind="list")
    return cast(T, _declare(entry))


def switch(*flags: str, help: str, panel: str) -> bool:
    """An on/off flag, off unless given."""
    return cast(bool, _declare(Option(flags=flags, help=help, panel=panel, kind="switch")))


def options_of(cls: type) -> tuple[Option, ...]:
    """The entries declared on a dataclass's fields, in field order, each naming its field."""
    return tuple(
        dataclasses.replace(f.metadata[OPTION_KEY], field=f.name)
        for f in dataclasses.fields(cls)
        if OPTION_KEY in f.metadata
    )


SHAPE = "Run shape"
PODS = "Pods"
NETWORK = "Network and privilege"
LIFETIME = "Lifetime"
METADATA = "Metadata"
MONITORING = "Monitoring"
