"""Names: valid identifiers, no duplicate modules, no function and job sharing a name."""

from __future__ import annotations

from ket.check.code import Subject, finding
from ket.check.message import CheckMessage
from ket.check.registry import CheckContext, register
from ket.declare.effect import MODEL_NAME, MODULE_NAME, OPERATION_NAME


@register("names")
def check_names(context: CheckContext) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    seen: dict[str, int] = {}
    for module in context.deployment.modules:
        if not MODULE_NAME.fullmatch(module.name):
            found.append(
                finding(
                    "KET001",
                    f"module name {module.name!r} is not valid",
                    Subject(obj=f"module {module.name}", source=module.source),
                )
            )
        if module.name in seen:
            found.append(
                finding(
                    "KET002",
                    f"module {module.name!r} appears {seen[module.name] + 1} times "
                    f"in deployment {context.deployment.name!r}",
                    Subject(obj=f"module {module.name}", source=module.source),
                )
            )
        seen[module.name] = seen.get(module.name, 0) + 1
        for kind, members in (("function", module.functions), ("job", module.jobs)):
            for name, decl in members.items():
                if not OPERATION_NAME.fullmatch(name):
                    found.append(
                        finding(
                            "KET001",
                            f"{kind} name {name!r} is not valid",
                            Subject(obj=f"{kind} {decl.title}", source=decl.source),
                        )
                    )
        for name, model in module.models.items():
            if not MODEL_NAME.fullmatch(name):
                found.append(
                    finding(
                        "KET001",
                        f"model name {name!r} is not valid",
                        Subject(obj=f"model {model.qualified_name}", source=model.source),
                    )
                )
        for name in sorted(set(module.functions) & set(module.jobs)):
            job = module.jobs[name]
            found.append(
                finding(
                    "KET003",
                    f"{module.name}.{name} is declared both as a function and as a job",
                    Subject(obj=f"job {job.title}", source=job.source),
                )
            )
    return found
