"""A worker's queue concurrency set per host: `--concurrency QUEUE=N` and KET_WORKER_CONCURRENCY.

The deployment declares each queue's concurrency; an operator may replace it on one host without
changing code. Both take `QUEUE=N` items (the variable, and each flag, a comma-separated list of
them); a flag wins over the variable for the queues it names. N follows the rule of a declared
concurrency (`ket.declare.worker.check_concurrency`), and only declared queues can be named: a
worker serves every queue of its deployment, so 0 is refused rather than read as "not here" (a
queue that no host serves would fill up silently).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ket.catalog import Catalog
from ket.declare.worker import WorkerConfig, check_concurrency
from ket.errors import KetError

FLAG = "--concurrency"
VARIABLE = "KET_WORKER_CONCURRENCY"
DECLARED = "declared"
ITEM = re.compile(r"(?P<queue>[^=\s]+)\s*=\s*(?P<value>\S*)")
NUMBER = re.compile(r"[0-9]{1,9}")  # longer: out of range anyway, and int() caps digits


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One `QUEUE=N` as an operator wrote it, and where (the flag or the variable)."""

    queue: str
    value: int
    source: str
    text: str


@dataclass(frozen=True, kw_only=True)
class HostConcurrency:
    """The operator's settings, by queue, after the flag has won over the variable."""

    settings: Mapping[str, Setting]

    def apply(self, catalog: Catalog) -> Catalog:
        """The catalog with these settings in its worker configuration; KetError naming the
        setting whose queue the deployment does not declare."""
        config = catalog.worker
        for setting in self.settings.values():
            try:
                config = config.with_concurrency({setting.queue: setting.value})
            except ValueError as error:
                raise KetError(f"{setting.source} {setting.text!r}: {error}") from None
        return dataclasses.replace(catalog, worker=config)

    def describe(self, config: WorkerConfig) -> str:
        """`default=50 (--concurrency), mail=4 (declared)`: each queue's effective concurrency
        and where it came from, for the worker's start-up line."""
        return ", ".join(
            f"{queue}={n} ({self.settings[queue].source if queue in self.settings else DECLARED})"
            for queue, n in sorted(config.queues.items())
        )


def add_option(parser: argparse.ArgumentParser) -> None:
    """`--concurrency QUEUE=N`, repeatable, for the commands that run a worker."""
    parser.add_argument(
        FLAG,
        action="append",
        default=[],
        metavar="QUEUE=N",
        help=f"run up to N jobs of QUEUE at once on this host, instead of the declared number "
        f"(repeatable; also {VARIABLE}='QUEUE=N,...', which this flag overrides)",
    )


def read(flags: Iterable[str], environ: Mapping[str, str]) -> HostConcurrency:
    """The settings of the command line and the environment; KetError naming a malformed item,
    a number that breaks the rule, or a queue named twice by one of them."""
    from_variable = _parse([environ.get(VARIABLE, "")], VARIABLE)
    from_flags = _parse(flags, FLAG)
    return HostConcurrency(settings={**from_variable, **from_flags})


def _parse(texts: Iterable[str], source: str) -> dict[str, Setting]:
    settings: dict[str, Setting] = {}
    for text in texts:
        if source == VARIABLE and not text.strip():
            continue  # an empty variable is an unset one
        for item in text.split(","):
            setting = _setting(item.strip(), source, text)
            if setting.queue in settings:
                first = settings[setting.queue].text
                raise KetError(
                    f"{source} names queue {setting.queue!r} twice ({first!r} and "
                    f"{setting.text!r}); give each queue once"
                )
            settings[setting.queue] = setting
    return settings


def _setting(item: str, source: str, text: str) -> Setting:
    if not item:
        raise KetError(f"{source} {text!r} has an empty item; expected QUEUE=N,...")
    match = ITEM.fullmatch(item)
    if match is None:
        raise KetError(f"{source} {item!r}: expected QUEUE=N, such as default=50")
    # int() would also take "+5", "5_0" and other scripts' digits: those go to the rule as written
    value: object = int(match["value"]) if NUMBER.fullmatch(match["value"]) else match["value"]
    try:
        number = check_concurrency(value)
    except ValueError as error:
        hint = " (0 is refused: every worker serves every queue of its deployment)"
        raise KetError(f"{source} {item!r}: {error}{hint if value == 0 else ''}") from None
    return Setting(queue=match["queue"], value=number, source=source, text=item)
