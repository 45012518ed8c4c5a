"""The user documentation stays true to the code: check ids, tags, worker options, examples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ket import define_deployment
from ket.check import CODES, run_checks, tags
from ket.declare import DeploymentDecl, ModuleDecl, WorkerConfig
from ket.declare.input import INPUT_ONLY_TYPES, SHORTHAND_TYPES
from ket.declare.serve import ServeConfig
from ket.diff import RULES

DOCS = Path(__file__).resolve().parents[2] / "docs"
CHECKS = DOCS / "checks.md"
DECLARING = DOCS / "declaring.md"
CLI = DOCS / "cli.md"

RULE_ROW = re.compile(r"^\| `(\w+)` \| (breaking|review|safe) \|", re.MULTILINE)
SHORTHAND_ROW = re.compile(r"^\| `(\w+)` \|", re.MULTILINE)
HEADING = re.compile(r"^## (KET\d{3}): (.+)$", re.MULTILINE)
ANY_ID = re.compile(r"\bKET\d{3}\b")

# What the examples of docs/checks.md take as given: the define_* functions and the handlers
# they name, each a valid `(ctx, input)` handler unless the example redefines it.
EXAMPLE_PRELUDE = """\
from ket import define_deployment, define_function, define_job, define_model, define_module

def sync_stock(ctx, input): ...
def send_receipt(ctx, input): ...
def refund(ctx, input): ...
"""


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _sections(text: str) -> dict[str, str]:
    """Body of each `## KETnnn: title` section, by id."""
    matches = list(HEADING.finditer(text))
    bodies: dict[str, str] = {}
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following else len(text)
        bodies[match.group(1)] = text[match.end() : end]
    return bodies


def test_every_catalogued_id_has_its_heading_with_the_catalogue_title() -> None:
    headings = {m.group(1): m.group(2) for m in HEADING.finditer(_read(CHECKS))}
    assert headings == {code.id: code.title for code in CODES.values()}


def test_check_headings_are_in_id_order() -> None:
    ids = [m.group(1) for m in HEADING.finditer(_read(CHECKS))]
    assert ids == sorted(ids)


def test_checks_doc_names_no_id_the_catalogue_lacks() -> None:
    named = set(ANY_ID.findall(_read(CHECKS)))
    assert named - set(CODES) == set()


def test_every_check_tag_is_documented() -> None:
    text = _read(CHECKS)
    assert [tag for tag in tags() if f"`{tag}`" not in text] == []


def test_every_worker_option_is_documented() -> None:
    text = _read(DECLARING)
    missing = [name for name in WorkerConfig.model_fields if f"`{name}`" not in text]
    assert missing == []


def test_every_serve_option_is_documented() -> None:
    text = _read(DOCS / "serve.md")
    options = text[text.index("## Options") : text.index("## Running it")]
    assert set(SHORTHAND_ROW.findall(options)) == set(ServeConfig.model_fields)


def test_shorthand_types_table_lists_every_type() -> None:
    text = _read(DECLARING)
    table = text[text.index("### Shorthand types") : text.index("### Pydantic classes")]
    assert set(SHORTHAND_ROW.findall(table)) == set(SHORTHAND_TYPES) | set(INPUT_ONLY_TYPES)


def test_diff_rule_table_is_the_rule_table_of_the_code() -> None:
    documented = dict(RULE_ROW.findall(_read(CLI)))
    assert documented == dict(RULES)


@pytest.mark.parametrize("code", sorted(CODES))
def test_check_section_states_the_level_and_tag_and_its_example_fires(code: str) -> None:
    body = _sections(_read(CHECKS))[code]
    level = re.search(r"\*\*Level:\*\* (\w+)\.", body)
    tag = re.search(r"\*\*Tag:\*\* `(\w+)`", body)
    example = re.search(r"```python\n(.*?)```", body, re.DOTALL)
    assert level and tag and example, f"{code}: section lacks a level, a tag or an example"
    assert level.group(1) == CODES[code].level.label

    namespace: dict[str, object] = {}
    exec(compile(EXAMPLE_PRELUDE + example.group(1), f"docs/checks.md:{code}", "exec"), namespace)
    deployments = [v for v in namespace.values() if isinstance(v, DeploymentDecl)]
    modules = [v for v in namespace.values() if isinstance(v, ModuleDecl)]
    deployment = deployments[0] if deployments else define_deployment(name="main", modules=modules)

    fired = {m.id for m in run_checks(deployment, timezone=None, only=[tag.group(1)])}
    assert code in fired, f"{code}: the example fires {sorted(fired)} under tag {tag.group(1)!r}"
