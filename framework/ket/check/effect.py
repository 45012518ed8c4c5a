"""Effects: each one follows the grammar, names something the deployment ships, once."""

from __future__ import annotations

from ket.check.code import Subject, finding
from ket.check.message import CheckMessage
from ket.check.registry import CheckContext, register
from ket.declare.deployment import DeploymentDecl
from ket.declare.effect import Effect, parse_effect
from ket.declare.job import JobDecl
from ket.errors import EffectSyntaxError


@register("effects")
def check_effects(context: CheckContext) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    deployment = context.deployment
    for operation in [*deployment.functions(), *deployment.jobs()]:
        kind = "job" if isinstance(operation, JobDecl) else "function"
        where = Subject(obj=f"{kind} {operation.title}", source=operation.source)
        seen: set[str] = set()
        for text in operation.effects:
            try:
                effect = parse_effect(text)
            except EffectSyntaxError as error:
                found.append(finding("KET301", error.message, where))
                continue
            if effect.text in seen:
                found.append(finding("KET303", f"effect {effect.text!r} is declared twice", where))
            seen.add(effect.text)
            problem = _unresolved(effect, deployment)
            if problem:
                found.append(finding("KET302", problem, where))
    return found


def _unresolved(effect: Effect, deployment: DeploymentDecl) -> str | None:
    """Why the effect's target does not exist in the deployment, or None when it does."""
    if effect.module is None or effect.name is None:
        return None
    module = deployment.module(effect.module)
    if module is None:
        names = ", ".join(sorted(m.name for m in deployment.modules)) or "none"
        return (
            f"effect {effect.text!r} names module {effect.module!r}, which deployment "
            f"{deployment.name!r} does not ship (modules: {names})"
        )
    members, what = (module.jobs, "job") if effect.verb == "enqueue" else (module.models, "model")
    if effect.name not in members:
        names = ", ".join(sorted(members)) or "none"
        return (
            f"effect {effect.text!r} names {what} {effect.name!r}, which module "
            f"{effect.module!r} does not declare ({what}s: {names})"
        )
    return None
