"""What a worker serves on this host: which queues (`--queues`, KET_WORKER_QUEUES) and how many
jobs of each at once (`--concurrency QUEUE=N`, KET_WORKER_CONCURRENCY).

The deployment declares its queues and each one's concurrency; an operator may narrow the
queues and change the numbers on one host without changing code, as Celery's `-Q` does. A
selection is a comma-separated list of queue names (the variable, and each flag: the flags add
up); the flags replace the variable whole. Concurrency items are `QUEUE=N` (the variable, and
each flag, a comma-separated list of them); a flag wins over the variable for the queues it
names. N follows the rule of a declared concurrency (`ket.declare.worker.check_concurrency`),
or is 0: "not on this host", as leaving the queue out of the selection. Only declared queues
can be named.

A `--concurrency` flag with N above 0 for a queue the selection leaves out contradicts it and
is refused; the variable's items for such a queue are ignored, since the variable may speak for
every worker of the host, each serving its own queues. A worker left with no queue is refused.
A queue that no worker serves fills up: `ket workers list` and the dashboard warn of one.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from ket.catalog import Catalog
from ket.declare.worker import MAX_CONCURRENCY, WorkerConfig, check_concurrency
from ket.errors import KetError

FLAG = "--concurrency"
VARIABLE = "KET_WORKER_CONCURRENCY"
QUEUES_FLAG = "--queues"
QUEUES_VARIABLE = "KET_WORKER_QUEUES"
DECLARED = "declared"
ITEM = re.compile(r"(?P<queue>[^=\s]+)\s*=\s*(?P<value>\S*)")
NUMBER = re.compile(r"[0-9]{1,9}")  # longer: out of range anyway, and int() caps digits


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One `QUEUE=N` as an operator wrote it, and where (the flag or the variable); N 0 leaves
    the queue to other hosts."""

    queue: str
    value: int
    source: str
    text: str


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The queues `--queues` or KET_WORKER_QUEUES names, in the order written, and the text."""

    queues: tuple[str, ...]
    source: str
    text: str


@dataclass(frozen=True, kw_only=True)
class HostConcurrency:
    """The operator's settings, by queue, after the flag has won over the variable, and the
    queues selected (None: every declared queue)."""

    settings: Mapping[str, Setting]
    selection: Selection | None = None

    def apply(self, catalog: Catalog) -> Catalog:
        """The catalog with this host's queues in its worker configuration: those selected,
        less those set to 0, each at the number set here or else declared; KetError naming a
        queue the deployment does not declare, a setting the selection contradicts, or a
        choice that leaves this worker no queue."""
        declared = catalog.worker
        selected = self._selected(declared)
        for setting in self.settings.values():
            _require(declared, setting.queue, f"{setting.source} {setting.text!r}")
            if setting.source == FLAG and setting.value and setting.queue not in selected:
                raise KetError(self._contradiction(setting))
        served = [q for q in selected if q not in self.settings or self.settings[q].value]
        if not served:
            raise KetError(self._nothing_left(selected))
        numbers = {q: s.value for q, s in self.settings.items() if q in served}
        config = declared.with_concurrency(numbers).serving(served)
        return dataclasses.replace(catalog, worker=config)

    def describe(self, config: WorkerConfig, declared: Collection[str] = ()) -> str:
        """`default=50 (--concurrency), mail=4 (declared), leaving reports (--queues) to other
        workers`: each queue served with its concurrency and where it came from, then each of
        the `declared` queues left out and what left it out, for the worker's start-up line."""
        served = ", ".join(
            f"{queue}={n} ({self._source(queue)})" for queue, n in sorted(config.queues.items())
        )
        left = [queue for queue in sorted(declared) if queue not in config.queues]
        if not left:
            return served
        reasons = ", ".join(f"{queue} ({self._left_by(queue)})" for queue in left)
        return f"{served}, leaving {reasons} to other workers"

    def _selected(self, declared: WorkerConfig) -> tuple[str, ...]:
        chosen = self.selection
        if chosen is None:
            return tuple(declared.queues)
        for queue in chosen.queues:
            _require(declared, queue, f"{chosen.source} {chosen.text!r}")
        return chosen.queues

    def _source(self, queue: str) -> str:
        return self.settings[queue].source if queue in self.settings else DECLARED

    def _left_by(self, queue: str) -> str:
        if self.selection is not None and queue not in self.selection.queues:
            return self.selection.source
        return f"{self.settings[queue].source} {self.settings[queue].text}"

    def _contradiction(self, setting: Setting) -> str:
        chosen = self.selection
        assert chosen is not None  # without a selection every declared queue is selected
        return (
            f"{setting.source} {setting.text!r} sets queue {setting.queue!r}, which "
            f"{chosen.source} {chosen.text!r} leaves out; add the queue there or drop the setting"
        )

    def _nothing_left(self, selected: Iterable[str]) -> str:
        zeros = [f"{self.settings[q].source} {self.settings[q].text!r}" for q in selected]
        chosen = self.selection
        which = "declared queue" if chosen is None else f"queue of {chosen.source} {chosen.text!r}"
        verb = "leaves" if len(zeros) == 1 else "leave"
        return (
            f"this worker would serve no queue: {', '.join(zeros)} {verb} out every {which}; "
            "let it serve one at least"
        )


def add_options(parser: argparse.ArgumentParser) -> None:
    """`--queues QUEUE,...` and `--concurrency QUEUE=N`, repeatable, for the commands that run a
    worker."""
    parser.add_argument(
        QUEUES_FLAG,
        action="append",
        default=[],
        metavar="QUEUE,...",
        help=f"serve only these queues on this host, leaving the others to other workers "
        f"(comma-separated, repeatable; also {QUEUES_VARIABLE}, which this flag overrides)",
    )
    parser.add_argument(
        FLAG,
        action="append",
        default=[],
        metavar="QUEUE=N",
        help=f"run up to N jobs of QUEUE at once on this host, instead of the declared number; "
        f"0: not on this host (repeatable; also {VARIABLE}='QUEUE=N,...', which this flag "
        "overrides)",
    )


def read(
    flags: Iterable[str], environ: Mapping[str, str], *, queues: Iterable[str] = ()
) -> HostConcurrency:
    """The settings of the command line and the environment (`flags` the --concurrency values,
    `queues` the --queues values); KetError naming a malformed item, a number that breaks the
    rule, or a queue named twice by one concurrency source."""
    from_variable = _parse([environ.get(VARIABLE, "")], VARIABLE)
    from_flags = _parse(flags, FLAG)
    variable_selection = _selection([environ.get(QUEUES_VARIABLE, "")], QUEUES_VARIABLE)
    flag_selection = _selection(list(queues), QUEUES_FLAG)
    return HostConcurrency(
        settings={**from_variable, **from_flags},
        selection=flag_selection if flag_selection is not None else variable_selection,
    )


def _selection(texts: list[str], source: str) -> Selection | None:
    names: list[str] = []
    for text in texts:
        if source == QUEUES_VARIABLE and not text.strip():
            continue  # an empty variable is an unset one
        if not text.strip():
            raise KetError(f"{source} {text!r} names no queue; expected QUEUE,... such as mail")
        for item in text.split(","):
            name = item.strip()
            if not name:
                raise KetError(f"{source} {text!r} has an empty item; expected QUEUE,...")
            if "=" in name:
                raise KetError(
                    f"{source} {text!r}: {name!r} is not a queue name; {source} takes names "
                    f"(mail,default), {FLAG} takes QUEUE=N"
                )
            if name not in names:  # a queue named twice is still one queue to serve
                names.append(name)
    if not names:
        return None
    return Selection(queues=tuple(names), source=source, text=",".join(texts))


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
    if value == 0:
        return Setting(queue=match["queue"], value=0, source=source, text=item)
    try:
        number = check_concurrency(value)
    except ValueError:
        raise KetError(
            f"{source} {item!r}: N must be a whole number from 1 to {MAX_CONCURRENCY}, or 0 "
            f"for a queue this host does not serve; got {value!r}"
        ) from None
    return Setting(queue=match["queue"], value=number, source=source, text=item)


def _require(config: WorkerConfig, queue: str, named_by: str) -> None:
    try:
        config.require_queue(queue)
    except ValueError as error:
        raise KetError(f"{named_by}: {error}") from None
