"""`--queues QUEUE,...`, `--concurrency QUEUE=N`, KET_WORKER_QUEUES and KET_WORKER_CONCURRENCY:
parsed, checked against the deployment, and carried into the worker configuration and the
connection pool it needs."""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.cli.concurrency import HostConcurrency, read
from ket.cli.worker import handler_threads_setting, pool_settings
from ket.errors import KetError


def handler(ctx: Any, input: Any) -> None:
    """A handler."""


SHOP = define_module(
    name="shop",
    jobs={
        "ship": define_job(idempotent=True, handler=handler),
        "mail": define_job(idempotent=True, queue="mail", handler=handler),
    },
)
CATALOG = Catalog.build(
    define_deployment(name="shop", modules=[SHOP], worker={"queues": {"default": 2, "mail": 4}}),
    environ={},
)


def queues(
    flags: list[str],
    variable: str | None = None,
    *,
    selected: tuple[str, ...] = (),
    selected_variable: str | None = None,
) -> dict[str, int]:
    environ = {} if variable is None else {"KET_WORKER_CONCURRENCY": variable}
    if selected_variable is not None:
        environ["KET_WORKER_QUEUES"] = selected_variable
    return dict(read(flags, environ, queues=selected).apply(CATALOG).worker.queues)


def refusal(
    flags: list[str],
    variable: str | None = None,
    *,
    selected: tuple[str, ...] = (),
    selected_variable: str | None = None,
) -> str:
    with pytest.raises(KetError) as raised:
        queues(flags, variable, selected=selected, selected_variable=selected_variable)
    return raised.value.message


def test_nothing_set_keeps_the_declared_concurrency() -> None:
    assert queues([]) == {"default": 2, "mail": 4}
    assert queues([], "") == {"default": 2, "mail": 4}  # an empty variable is an unset one
    assert queues([], "  ") == {"default": 2, "mail": 4}


def test_the_flag_replaces_the_queues_it_names() -> None:
    assert queues(["default=50"]) == {"default": 50, "mail": 4}
    assert queues(["default=50", "mail=5"]) == {"default": 50, "mail": 5}


def test_one_flag_may_list_several_queues_as_the_variable_does() -> None:
    assert queues(["default=50, mail=5"]) == {"default": 50, "mail": 5}


def test_the_variable_replaces_the_queues_it_names() -> None:
    assert queues([], "default=50,mail=5") == {"default": 50, "mail": 5}
    assert queues([], " mail = 1 ") == {"default": 2, "mail": 1}


def test_the_flag_wins_over_the_variable_for_the_queues_it_names() -> None:
    assert queues(["default=7"], "default=50,mail=5") == {"default": 7, "mail": 5}


def test_the_catalog_it_was_given_is_left_alone() -> None:
    read(["default=50"], {}).apply(CATALOG)
    assert CATALOG.worker.queues == {"default": 2, "mail": 4}


def test_queues_serves_only_the_queues_it_names() -> None:
    assert queues([], selected=("mail",)) == {"mail": 4}
    assert queues([], selected=("mail,default",)) == {"default": 2, "mail": 4}
    assert queues([], selected=("mail", "default")) == {"default": 2, "mail": 4}  # repeated
    assert queues([], selected=(" mail , mail ",)) == {"mail": 4}  # twice is still once


def test_the_queues_variable_selects_and_the_flag_replaces_it_whole() -> None:
    assert queues([], selected_variable="mail") == {"mail": 4}
    assert queues([], selected_variable="") == {"default": 2, "mail": 4}  # empty is unset
    assert queues([], selected=("default",), selected_variable="mail") == {"default": 2}


def test_a_concurrency_of_0_leaves_the_queue_out_as_queues_does() -> None:
    assert queues(["default=0"]) == {"mail": 4}
    assert queues([], "default=0,mail=6") == {"mail": 6}
    assert queues(["default=3"], "default=0") == {"default": 3, "mail": 4}  # the flag wins
    assert queues(["default=0"], selected=("mail",)) == {"mail": 4}  # says the same


def test_concurrency_sets_the_number_of_a_selected_queue() -> None:
    assert queues(["mail=8"], selected=("mail",)) == {"mail": 8}
    assert queues(["mail=8"], selected_variable="mail") == {"mail": 8}


def test_the_concurrency_variable_may_name_queues_this_worker_leaves_out() -> None:
    # the variable speaks for every worker of the host, each serving queues of its own
    assert queues([], "default=50,mail=5", selected=("mail",)) == {"mail": 5}


@pytest.mark.parametrize(
    ("flags", "selected", "selected_variable", "message"),
    [
        (
            [],
            ("mail,reports",),
            None,
            "--queues 'mail,reports': queue 'reports' is not declared (declared: default, mail)",
        ),
        (
            [],
            ("mail", "reports"),
            None,
            "--queues 'mail,reports': queue 'reports' is not declared (declared: default, mail)",
        ),
        (
            [],
            (),
            "reports",
            "KET_WORKER_QUEUES 'reports': queue 'reports' is not declared "
            "(declared: default, mail)",
        ),
        ([], ("",), None, "--queues '' names no queue; expected QUEUE,... such as mail"),
        ([], ("mail,",), None, "--queues 'mail,' has an empty item; expected QUEUE,..."),
        (
            [],
            ("mail=4",),
            None,
            "--queues 'mail=4': 'mail=4' is not a queue name; --queues takes names "
            "(mail,default), --concurrency takes QUEUE=N",
        ),
        (
            [],
            ("default",),
            "mail,",  # checked though the flag wins: it is meant for every worker of the host
            "KET_WORKER_QUEUES 'mail,' has an empty item; expected QUEUE,...",
        ),
        (
            ["default=5"],
            ("mail",),
            None,
            "--concurrency 'default=5' sets queue 'default', which --queues 'mail' leaves out; "
            "add the queue there or drop the setting",
        ),
        (
            ["default=5"],
            (),
            "mail",
            "--concurrency 'default=5' sets queue 'default', which KET_WORKER_QUEUES 'mail' "
            "leaves out; add the queue there or drop the setting",
        ),
        (
            ["default=0", "mail=0"],
            (),
            None,
            "this worker would serve no queue: --concurrency 'default=0', --concurrency "
            "'mail=0' leave out every declared queue; let it serve one at least",
        ),
        (
            ["mail=0"],
            ("mail",),
            None,
            "this worker would serve no queue: --concurrency 'mail=0' leaves out every queue of "
            "--queues 'mail'; let it serve one at least",
        ),
    ],
)
def test_a_bad_selection_is_refused_naming_it(
    flags: list[str], selected: tuple[str, ...], selected_variable: str | None, message: str
) -> None:
    assert refusal(flags, selected=selected, selected_variable=selected_variable) == message


def test_every_queue_at_0_in_the_variable_is_refused_too() -> None:
    assert refusal([], "default=0,mail=0") == (
        "this worker would serve no queue: KET_WORKER_CONCURRENCY 'default=0', "
        "KET_WORKER_CONCURRENCY 'mail=0' leave out every declared queue; let it serve one at least"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["default"], "--concurrency 'default': expected QUEUE=N, such as default=50"),
        (["=5"], "--concurrency '=5': expected QUEUE=N, such as default=50"),
        (["default=5 0"], "--concurrency 'default=5 0': expected QUEUE=N, such as default=50"),
        (
            ["default=x"],
            "--concurrency 'default=x': N must be a whole number from 1 to 1000, or 0 for a "
            "queue this host does not serve; got 'x'",
        ),
        (
            ["default="],
            "--concurrency 'default=': N must be a whole number from 1 to 1000, or 0 for a "
            "queue this host does not serve; got ''",
        ),
        (
            ["default=+5"],
            "--concurrency 'default=+5': N must be a whole number from 1 to 1000, or 0 for a "
            "queue this host does not serve; got '+5'",
        ),
        (
            ["default=-1"],
            "--concurrency 'default=-1': N must be a whole number from 1 to 1000, or 0 for a "
            "queue this host does not serve; got '-1'",
        ),
        (
            ["default=1001"],
            "--concurrency 'default=1001': N must be a whole number from 1 to 1000, or 0 for "
            "a queue this host does not serve; got 1001",
        ),
        (
            ["default=5", "default=6"],
            "--concurrency names queue 'default' twice ('default=5' and 'default=6'); "
            "give each queue once",
        ),
        (
            ["default=" + "9" * 5_000],  # past int()'s digit limit: refused all the same
            "--concurrency 'default=" + "9" * 5_000 + "': N must be a whole number from 1 to "
            "1000, or 0 for a queue this host does not serve; got '" + "9" * 5_000 + "'",
        ),
        (["default=5,"], "--concurrency 'default=5,' has an empty item; expected QUEUE=N,..."),
        ([""], "--concurrency '' has an empty item; expected QUEUE=N,..."),
        (
            ["reports=5"],
            "--concurrency 'reports=5': queue 'reports' is not declared (declared: default, mail)",
        ),
    ],
)
def test_a_malformed_or_unknown_setting_is_refused_naming_it(
    flags: list[str], message: str
) -> None:
    assert refusal(flags) == message


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        ("default", "KET_WORKER_CONCURRENCY 'default': expected QUEUE=N, such as default=50"),
        (
            "default=5,mail=x",
            "KET_WORKER_CONCURRENCY 'mail=x': N must be a whole number from 1 to 1000, or 0 "
            "for a queue this host does not serve; got 'x'",
        ),
        (
            "mail=1,mail=2",
            "KET_WORKER_CONCURRENCY names queue 'mail' twice ('mail=1' and 'mail=2'); "
            "give each queue once",
        ),
        (
            "reports=5",
            "KET_WORKER_CONCURRENCY 'reports=5': queue 'reports' is not declared "
            "(declared: default, mail)",
        ),
    ],
)
def test_a_malformed_variable_is_refused_naming_it(variable: str, message: str) -> None:
    assert refusal([], variable) == message


def test_a_malformed_variable_is_refused_even_for_a_queue_the_flag_names() -> None:
    # the variable is meant for every worker of the host: a mistake in it must not hide
    assert refusal(["default=5"], "default=x").startswith("KET_WORKER_CONCURRENCY 'default=x'")


def test_the_start_up_line_says_where_each_concurrency_came_from() -> None:
    settings = read(["default=7"], {"KET_WORKER_CONCURRENCY": "mail=5"})
    assert settings.describe(settings.apply(CATALOG).worker) == (
        "default=7 (--concurrency), mail=5 (KET_WORKER_CONCURRENCY)"
    )
    assert HostConcurrency(settings={}).describe(CATALOG.worker) == (
        "default=2 (declared), mail=4 (declared)"
    )


def test_the_start_up_line_says_which_queues_are_left_to_other_workers_and_why() -> None:
    settings = read(["default=0"], {"KET_WORKER_QUEUES": "default,mail"})
    assert settings.describe(settings.apply(CATALOG).worker, CATALOG.worker.queues) == (
        "mail=4 (declared), leaving default (--concurrency default=0) to other workers"
    )
    settings = read(["mail=6"], {}, queues=["mail"])
    assert settings.describe(settings.apply(CATALOG).worker, CATALOG.worker.queues) == (
        "mail=6 (--concurrency), leaving default (--queues) to other workers"
    )


def test_the_connection_pool_follows_the_concurrency_this_host_runs() -> None:
    # one connection per job slot, one per queue's claim loop, and six for the services
    assert pool_settings(CATALOG, {}) == (2 + 4 + 2 + 6, 30.0)
    raised = read(["default=50"], {}).apply(CATALOG)
    assert pool_settings(raised, {}) == (50 + 4 + 2 + 6, 30.0)
    lowered = read([], {"KET_WORKER_CONCURRENCY": "default=1,mail=1"}).apply(CATALOG)
    assert pool_settings(lowered, {}) == (1 + 1 + 2 + 6, 30.0)


def test_the_connection_pool_and_threads_count_the_served_queues_alone() -> None:
    mail = read([], {}, queues=["mail"]).apply(CATALOG)
    assert pool_settings(mail, {}) == (4 + 1 + 6, 30.0)
    assert handler_threads_setting(mail, {"KET_HANDLER_THREADS": "4"}) == 4


def test_a_pool_size_too_small_for_the_raised_concurrency_is_refused_with_the_numbers() -> None:
    raised = read(["default=50"], {}).apply(CATALOG)
    assert pool_settings(CATALOG, {"KET_POOL_SIZE": "20"})[0] == 20
    with pytest.raises(KetError) as refused:
        pool_settings(raised, {"KET_POOL_SIZE": "20"})
    assert refused.value.message == (
        "KET_POOL_SIZE=20 is too small for this deployment: it needs 62 connections per tenant "
        "(54 job slots + 2 queue claim loops + 6 services); raise it or unset it"
    )


def test_the_handler_threads_are_64_or_one_tenants_slots_and_never_fewer() -> None:
    assert handler_threads_setting(CATALOG, {}) == 64
    raised = read(["default=100"], {}).apply(CATALOG)
    assert handler_threads_setting(raised, {}) == 104  # a lone tenant's slots all find one
    assert handler_threads_setting(CATALOG, {"KET_HANDLER_THREADS": "8"}) == 8
    with pytest.raises(KetError) as refused:
        handler_threads_setting(raised, {"KET_HANDLER_THREADS": "8"})
    assert refused.value.message == (
        "KET_HANDLER_THREADS=8 is too few for this deployment: one tenant has 104 job slots, "
        "and each must find a thread; raise it or unset it"
    )
    with pytest.raises(KetError, match=r"KET_HANDLER_THREADS must be a number, got 'many'"):
        handler_threads_setting(CATALOG, {"KET_HANDLER_THREADS": "many"})
