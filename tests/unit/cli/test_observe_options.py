"""The options of logs and metrics: --log-format and KET_LOG_FORMAT, KET_LOG_THIRD_PARTY,
--metrics-port and its KET_METRICS_* variables, each refused with the offending value."""

from __future__ import annotations

import argparse

import pytest

from ket.cli import metrics
from ket.cli.metrics import MetricsSettings
from ket.cli.options import add_log_options, log_format, log_third_party
from ket.errors import KetError


def parsed(*words: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_log_options(parser)
    metrics.add_options(parser)
    return parser.parse_args(list(words))


def test_log_format_comes_from_the_flag_then_the_environment_then_text() -> None:
    assert log_format(parsed(), {}) == "text"
    assert log_format(parsed(), {"KET_LOG_FORMAT": "json"}) == "json"
    assert log_format(parsed("--log-format", "text"), {"KET_LOG_FORMAT": "json"}) == "text"
    with pytest.raises(KetError, match="KET_LOG_FORMAT must be text or json, got 'xml'"):
        log_format(parsed(), {"KET_LOG_FORMAT": "xml"})


def test_third_party_logs_are_an_explicit_opt_in() -> None:
    assert (log_third_party({}), log_third_party({"KET_LOG_THIRD_PARTY": "1"})) == (False, True)
    with pytest.raises(KetError, match="KET_LOG_THIRD_PARTY must be 0 or 1, got 'yes'"):
        log_third_party({"KET_LOG_THIRD_PARTY": "yes"})


def test_no_port_means_no_metrics() -> None:
    assert metrics.settings(parsed(), {}) is None
    assert metrics.settings(parsed("--metrics-tenant-labels"), {}) is None


def test_metrics_settings_from_flags_win_over_the_environment() -> None:
    environ = {
        "KET_METRICS_PORT": "9100",
        "KET_METRICS_HOST": "0.0.0.0",
        "KET_METRICS_TENANT_LABELS": "1",
        "KET_METRICS_REFRESH_S": "2.5",
    }
    assert metrics.settings(parsed(), environ) == MetricsSettings(
        host="0.0.0.0", port=9100, tenant_labels=True, refresh_seconds=2.5
    )
    assert metrics.settings(
        parsed("--metrics-port", "9464", "--metrics-host", "::1"), {}
    ) == MetricsSettings(host="::1", port=9464, tenant_labels=False, refresh_seconds=15.0)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"KET_METRICS_PORT": "http"}, "KET_METRICS_PORT must be a port number, got 'http'"),
        ({"KET_METRICS_PORT": "70000"}, "KET_METRICS_PORT must be from 0 to 65535, got 70000"),
        (
            {"KET_METRICS_PORT": "9100", "KET_METRICS_REFRESH_S": "0"},
            "KET_METRICS_REFRESH_S must be seconds above 0 and at most 3600, got '0'",
        ),
        (
            {"KET_METRICS_PORT": "9100", "KET_METRICS_TENANT_LABELS": "true"},
            "KET_METRICS_TENANT_LABELS must be 0 or 1, got 'true'",
        ),
    ],
)
def test_bad_metrics_variables_are_refused_naming_the_value(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(KetError) as raised:
        metrics.settings(parsed(), environ)
    assert raised.value.message == message


def test_a_bad_port_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parsed("--metrics-port", "-1")
    assert "a port is a number from 0 to 65535, got '-1'" in capsys.readouterr().err
