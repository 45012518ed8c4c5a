"""Choosing where blobs live from `KET_STORAGE_URL`, and refusing URLs that say it badly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ket.errors import StorageError
from ket.storage import (
    LocalBlobs,
    LocalLocation,
    S3Location,
    blobs_from_environ,
    blobs_from_url,
    parse_storage_url,
)
from ket.storage.url import shown

FORMS = "expected file: (the project's .ket/storage), file:///absolute/folder, or s3://"


@pytest.mark.parametrize("url", [None, "", "file:", "file://"])
def test_unset_empty_and_bare_file_urls_mean_the_projects_dot_ket_storage(
    url: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app.py"\n')
    (tmp_path / "deep" / "er").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "deep" / "er")
    assert parse_storage_url(url) == LocalLocation(root=None)
    blobs = blobs_from_url(url)
    assert isinstance(blobs, LocalBlobs)
    assert blobs.root == tmp_path.resolve() / ".ket" / "storage"  # absolute, at the project


def test_a_file_url_names_an_absolute_folder_percent_decoded() -> None:
    assert parse_storage_url("file:///srv/ket%20blobs") == LocalLocation(
        root=Path("/srv/ket blobs")
    )
    assert parse_storage_url("file://localhost/srv/b") == LocalLocation(root=Path("/srv/b"))
    blobs = blobs_from_url("file:///srv/ket/blobs")
    assert isinstance(blobs, LocalBlobs) and blobs.root == Path("/srv/ket/blobs")


def test_the_environment_variable_chooses_the_backend(tmp_path: Path) -> None:
    blobs = blobs_from_environ({"KET_STORAGE_URL": f"file://{tmp_path}"})
    assert isinstance(blobs, LocalBlobs) and blobs.root == tmp_path


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://invoices", S3Location(bucket="invoices", prefix="", endpoint_url=None, region=None)),
        (
            "s3://my.bucket-1/ket/blobs/",
            S3Location(bucket="my.bucket-1", prefix="ket/blobs", endpoint_url=None, region=None),
        ),
        (
            "s3://b12/p?endpoint_url=http://127.0.0.1:9000&region=eu-west-1",
            S3Location(
                bucket="b12", prefix="p", endpoint_url="http://127.0.0.1:9000", region="eu-west-1"
            ),
        ),
        (
            "s3://b12?endpoint_url=https%3A%2F%2Fs3.example.com%3A8443%2Fbase&region=auto",
            S3Location(
                bucket="b12",
                prefix="",
                endpoint_url="https://s3.example.com:8443/base",
                region="auto",
            ),
        ),
    ],
)
def test_s3_urls_name_a_bucket_a_prefix_an_endpoint_and_a_region(
    url: str, expected: S3Location
) -> None:
    assert parse_storage_url(url) == expected


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("file:relative/blobs", "the folder must be absolute"),
        ("file://otherhost/srv", "not on 'otherhost'"),
        ("file:///srv?x=1", "a file URL takes no parameters"),
        ("file:///srv#frag", "a fragment (#...) means nothing here"),
        ("s3://", "the bucket must be 3 to 63"),
        ("s3://UPPER", "the bucket must be 3 to 63"),
        ("s3://ab", "the bucket must be 3 to 63"),
        ("s3://bucket:9000", "the bucket must be 3 to 63"),
        ("s3://bucket/a/../b", "the prefix 'a/../b' is not a plain path: '..' segments"),
        ("s3://bucket/a//b", "the prefix 'a//b' is not a plain path: empty segments"),
        ("s3://bucket/%2e%2e", "percent-escapes"),
        ("s3://bucket?region=eu-west-1&region=us-east-1", "parameter 'region' is given twice"),
        ("s3://bucket?region=", "parameter 'region' is empty"),
        ("s3://bucket?region=eu west", "region 'eu west' is not a region name"),
        ("s3://bucket?endpoint=http://x", "unknown parameter 'endpoint'"),
        ("s3://bucket?endpoint_url=ftp://host", "endpoint_url must be http://host[:port]"),
        ("s3://bucket?endpoint_url=localhost:9000", "endpoint_url must be http://host[:port]"),
        ("s3://bucket?endpoint_url=http://h:99999", "endpoint_url does not parse"),
        ("s3://bucket?endpoint_url=http://h/?x=1", "endpoint_url takes no query or fragment"),
    ],
)
def test_malformed_urls_are_refused_naming_the_url_and_the_problem(url: str, problem: str) -> None:
    with pytest.raises(StorageError) as raised:
        blobs_from_url(url)
    message = str(raised.value)
    # shown as given, but for parameter values and fragments that could hold a secret
    assert message.startswith(f"malformed storage URL {shown(url)!r}: ")
    assert shown(url) == url or "***" in shown(url)
    assert problem in message
    assert FORMS in message


def test_an_unknown_scheme_is_refused_naming_the_forms() -> None:
    with pytest.raises(StorageError) as raised:
        blobs_from_url("gs://bucket/prefix")
    assert str(raised.value).startswith(f"unknown storage URL 'gs://bucket/prefix'; {FORMS}")


@pytest.mark.parametrize(
    ("url", "secret", "masked"),
    [
        ("s3://AKIDEXAMPLE:wJalrXUtnFEMI@bucket/p", "wJalrXUtnFEMI", "s3://***@bucket/p"),
        ("s3://user:hunter2@[::1", "hunter2", "s3://***@[::1"),
        (
            "s3://bucket?secret_access_key=wJalrXUtnFEMI&region=eu-west-1",
            "wJalrXUtnFEMI",
            "s3://bucket?secret_access_key=***&region=eu-west-1",
        ),
        (
            "s3://bucket?endpoint_url=http://key:hunter2@host",
            "hunter2",
            "s3://bucket?endpoint_url=***",
        ),
        (
            "s3://bucket?endpoint_url=https://host/?X-Amz-Signature=hunter2&region=eu-west-1",
            "hunter2",
            "s3://bucket?endpoint_url=***&region=eu-west-1",
        ),
        (
            "s3://bucket?endpoint_url=https%3A%2F%2Fhost%2F%3Ftoken%3Dhunter2",
            "hunter2",
            "s3://bucket?endpoint_url=***",
        ),
        ("file:///srv#token=hunter2", "hunter2", "file:///srv#***"),
    ],
)
def test_a_refused_url_never_shows_a_secret(url: str, secret: str, masked: str) -> None:
    with pytest.raises(StorageError) as raised:
        blobs_from_url(url)
    assert secret not in str(raised.value)
    assert repr(masked) in str(raised.value)
    assert shown(url) == masked


def test_credentials_in_an_s3_url_are_refused_saying_where_they_go() -> None:
    with pytest.raises(StorageError, match="credentials do not go in the URL; set AWS_ACCESS"):
        blobs_from_url("s3://key:secret@bucket")


def test_a_url_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(StorageError, match="a storage URL must be a string, got bytes"):
        blobs_from_url(b"s3://bucket")  # type: ignore[arg-type]


def test_s3_without_the_extra_installed_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "obstore", None)  # as if `ket-jobs[s3]` were not installed
    monkeypatch.setitem(sys.modules, "obstore.store", None)
    with pytest.raises(StorageError) as raised:
        blobs_from_url("s3://invoices/ket")
    assert str(raised.value) == (
        "KET_STORAGE_URL names S3 storage, which needs obstore: pip install 'ket-jobs[s3]'"
    )


def test_an_s3_backend_is_made_without_reaching_the_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # made at start to check the URL; credentials and the bucket are reached on first use
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    blobs = blobs_from_url("s3://invoices/ket?endpoint_url=http://127.0.0.1:9&region=eu-west-1")
    assert repr(blobs) == (
        "S3Blobs('s3://invoices/ket', endpoint_url='http://127.0.0.1:9', region='eu-west-1')"
    )
    assert "testing" not in repr(blobs)
