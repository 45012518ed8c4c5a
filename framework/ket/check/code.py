"""Every check id, its level, title and default hint. Ids are never reused; see docs/checks.md."""

from __future__ import annotations

from dataclasses import dataclass

from ket.check.message import CheckMessage, Level
from ket.declare.source import SourceLocation


@dataclass(frozen=True, kw_only=True)
class Code:
    """A catalogued check id."""

    id: str
    level: Level
    title: str
    hint: str


E, W = Level.ERROR, Level.WARNING

CODES: dict[str, Code] = {
    code.id: code
    for code in [
        Code(
            id="KET001",
            level=E,
            title="invalid name",
            hint="Use lowercase letters, digits and underscores for modules, functions and jobs "
            "(starting with a letter), and a letter-first identifier for models.",
        ),
        Code(
            id="KET002",
            level=E,
            title="duplicate module",
            hint="Give each module of a deployment its own name, or list the module once.",
        ),
        Code(
            id="KET003",
            level=E,
            title="function and job share a name",
            hint="Rename the function or the job so `<module>.<name>` means one thing.",
        ),
        Code(
            id="KET101",
            level=E,
            title="job is not idempotent",
            hint="Delivery is at least once: make the handler safe to run twice, then declare "
            "idempotent=True.",
        ),
        Code(
            id="KET102",
            level=E,
            title="max_attempts must be a positive integer",
            hint="Set max_attempts to 1 or more (the default is 20).",
        ),
        Code(
            id="KET103",
            level=E,
            title="timeout_ms must be a positive integer",
            hint="Set timeout_ms to the milliseconds an attempt may run (the default is 300000).",
        ),
        Code(
            id="KET104",
            level=E,
            title="priority must be an integer",
            hint="Use an integer priority; lower numbers run first (the default is 0).",
        ),
        Code(
            id="KET105",
            level=E,
            title="handler is not callable",
            hint="Pass the function itself as handler=, e.g. handler=send_confirmation.",
        ),
        Code(
            id="KET106",
            level=E,
            title="handler cannot take (ctx, input)",
            hint="Define the handler as `def handler(ctx, input):` (or `async def`).",
        ),
        Code(
            id="KET107",
            level=E,
            title="backoff cannot take (attempt)",
            hint="Pass a callable `backoff(attempt) -> seconds`, or leave it out for the default.",
        ),
        Code(
            id="KET108",
            level=E,
            title="flag must be True or False",
            hint="Write idempotent= and cross_company= as True or False.",
        ),
        Code(
            id="KET109",
            level=E,
            title="input_version must be a positive integer",
            hint="Number the shape of the job's input 1, 2, 3, ...; leave it out for 1.",
        ),
        Code(
            id="KET110",
            level=E,
            title="upgrade cannot bring old payloads to input_version",
            hint="Give upgrade={version: fn} with one fn(payload) -> payload for each version "
            "from the oldest you still accept up to input_version - 1.",
        ),
        Code(
            id="KET111",
            level=E,
            title="tags are not a list of short strings",
            hint="Give tags=['billing', 'eu']: at most 32 distinct strings of 1 to 100 "
            "characters each.",
        ),
        Code(
            id="KET201",
            level=E,
            title="schedule does not parse",
            hint="Use {'every': '15m'}, {'daily_at': 'HH:MM', 'timezone': ...} or "
            "{'cron': '<5 fields>', 'timezone': ...}.",
        ),
        Code(
            id="KET202",
            level=E,
            title="every is shorter than 10 seconds",
            hint="Schedule no more often than every 10s; for tighter loops run a long job.",
        ),
        Code(
            id="KET203",
            level=E,
            title="daily_at is not HH:MM",
            hint="Write the time as 24-hour HH:MM, e.g. '03:00' or '23:30'.",
        ),
        Code(
            id="KET204",
            level=E,
            title="unknown timezone",
            hint="Use an IANA zone name such as 'Europe/London' or 'Asia/Ho_Chi_Minh'.",
        ),
        Code(
            id="KET205",
            level=E,
            title="wall-clock schedule has no timezone",
            hint="Add 'timezone': '<IANA zone>' to the schedule, or set KET_TIMEZONE; ket never "
            "assumes the server's zone.",
        ),
        Code(
            id="KET206",
            level=E,
            title="scheduled job has required input",
            hint="Nobody supplies input at a tick: make the fields optional ('string?') or drop "
            "the schedule and enqueue the job yourself.",
        ),
        Code(
            id="KET207",
            level=E,
            title="schedule never fires",
            hint="Fix the cron expression so some date matches it (e.g. no 30 February).",
        ),
        Code(
            id="KET301",
            level=E,
            title="malformed effect",
            hint="Write effects as read:<module>.<Model>, write:<module>.<Model>, "
            "enqueue:<module>.<job>, storage:read, storage:write or transport:send.",
        ),
        Code(
            id="KET302",
            level=E,
            title="effect names nothing in the deployment",
            hint="Point the effect at a module, model or job the deployment ships, or add "
            "that module to the deployment.",
        ),
        Code(
            id="KET303", level=W, title="effect declared twice", hint="Remove the repeated effect."
        ),
        Code(
            id="KET401",
            level=E,
            title="queue is not configured on the deployment",
            hint="Add the queue to worker={'queues': {...}} with its concurrency, or move the "
            "job to a configured queue.",
        ),
        Code(
            id="KET402",
            level=E,
            title="invalid worker configuration",
            hint="Fix the value in define_deployment(worker={...}); see docs/declaring.md.",
        ),
        Code(
            id="KET403",
            level=E,
            title="invalid queue name",
            hint="Name queues with letters, digits, '_', '-' or '.', starting with a letter or "
            "digit, at most 64 characters.",
        ),
        Code(
            id="KET501",
            level=E,
            title="input cannot be compiled",
            hint="Declare input as a dict of field to type (id, string, int, number, bool, "
            "datetime, date, json; '?' for optional) or a pydantic model class.",
        ),
        Code(
            id="KET502",
            level=E,
            title="model field cannot be compiled",
            hint="Declare model fields as name -> type (id, string, int, number, bool, datetime, "
            "date, json; '?' for optional); `id` is generated by ket, do not declare it.",
        ),
        Code(
            id="KET503",
            level=E,
            title="output cannot be compiled",
            hint="Declare a job's output as a dict of field to type (id, string, int, number, "
            "bool, datetime, date, json, secret; '?' for optional) or a pydantic model class.",
        ),
        Code(
            id="KET601",
            level=E,
            title="invalid serve configuration",
            hint="Fix the value in define_deployment(serve={...}); see docs/serve.md.",
        ),
        Code(
            id="KET602",
            level=E,
            title="authenticator cannot take (request)",
            hint="Define the authenticator as `def authenticate(request):` (or `async def`), "
            "returning a ket.serve.Principal or None.",
        ),
        Code(
            id="KET701",
            level=E,
            title="expires_in is not a duration",
            hint="Write expires_in as '<count><s|m|h|d>', counted from 1 and at most 365d, such "
            "as '10m' or '2h'.",
        ),
        Code(
            id="KET702",
            level=E,
            title="concurrency_limit is malformed",
            hint="Give concurrency_limit as a whole number from 1, such as 3, or as "
            "{'limit': 1, 'key': ['customer_id']} to limit each customer on its own.",
        ),
        Code(
            id="KET703",
            level=E,
            title="rate_limit is malformed",
            hint="Give rate_limit as {'limit': 20, 'period': '1s'}: a limit from 1 and a period "
            "from 1s to 1d, with 'key': [fields] to limit each of their values on its own.",
        ),
        Code(
            id="KET704",
            level=E,
            title="key of a limit, window or debounce names a field the input lacks",
            hint="Name fields of the job's input in key, or add the field to the input.",
        ),
        Code(
            id="KET705",
            level=E,
            title="key field of a limit, window or debounce is not a scalar",
            hint="Key a limit, window or debounce by input fields of type id, string, int, "
            "number, bool, date or datetime; not json, whose value is a structure, nor secret, "
            "whose value a key would keep in clear.",
        ),
        Code(
            id="KET706",
            level=E,
            title="invalid queue limits",
            hint="Write the queue as {'concurrency': 4, 'concurrency_limit': 10, 'rate_limit': "
            "{'limit': 100, 'period': '1m'}}; a keyed limit belongs on the job, whose input has "
            "the fields.",
        ),
        Code(
            id="KET707",
            level=W,
            title="expires_in is within the worker's poll_max_ms",
            hint="Lengthen expires_in well past poll_max_ms, or lower poll_max_ms: an idle "
            "worker that missed a wake-up looks at the queue only every poll_max_ms.",
        ),
        Code(
            id="KET708",
            level=E,
            title="unique is malformed",
            hint="Give unique as {'period': '1h', 'key': ['customer_id']}: a period from 1s to "
            "365d, with 'key': [fields] to join only jobs of the same values, and 'states': "
            "[states] to join jobs in other states than available, scheduled, executing, "
            "retryable and completed.",
        ),
        Code(
            id="KET709",
            level=E,
            title="debounce is malformed",
            hint="Give debounce as {'period': '30s', 'key': ['customer_id']}: a period from 1s "
            "to 365d, with 'key': [fields] to debounce each of their values on its own, and "
            "'max_wait': '5m', at least the period, to run a job enqueued again and again at "
            "last.",
        ),
        Code(
            id="KET710",
            level=E,
            title="job declares both unique and debounce",
            hint="Choose one: debounce to run a job once the enqueues of its key stop, with the "
            "last input; unique to join the job already enqueued within the period, which keeps "
            "its input.",
        ),
        Code(
            id="KET711",
            level=W,
            title="unique period outlives the retention of finished jobs",
            hint="Shorten the period to the retention, lengthen the worker's retention_ms for "
            "that state (None keeps its jobs), or leave the state out of the window's states.",
        ),
    ]
}

# The hint of a limit of 0, which would never start a job: that is what a pause is for.
PAUSE_HINT = (
    "A limit of 0 would never start a job: to hold a queue's jobs, pause the queue with "
    "`ket queues pause QUEUE` and resume it later; otherwise give a limit of 1 or more."
)


@dataclass(frozen=True, kw_only=True)
class Subject:
    """What a finding is about, and where it was declared."""

    obj: str
    source: SourceLocation


def finding(code: str, msg: str, at: Subject, *, hint: str | None = None) -> CheckMessage:
    """A finding for a catalogued code, with its level and default hint."""
    entry = CODES[code]
    return CheckMessage(
        id=entry.id,
        level=entry.level,
        msg=msg,
        hint=hint or entry.hint,
        obj=at.obj,
        source=at.source,
    )
