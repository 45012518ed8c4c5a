"""Choosing where blobs live: `KET_STORAGE_URL`, the project's `.ket/storage` by default.

    unset, empty, file: or file://          files under <project root>/.ket/storage
    file:///srv/ket/blobs                   files under that folder
    s3://bucket[/prefix][?endpoint_url=https://host:port&region=eu-west-1]
                                            an S3-compatible bucket (needs `ket-jobs[s3]`)

Every URL is checked whole before anything uses it, and a refused one is named with whatever
could be a secret in it masked. S3 credentials never go in the URL: they come from the standard
AWS environment (see ket.storage.s3).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from ket.errors import StorageError
from ket.storage.blobs import BlobStore
from ket.storage.key import key_problem
from ket.storage.local import LocalBlobs, default_storage_root

STORAGE_URL_VARIABLE = "KET_STORAGE_URL"
FORMS = (
    "file: (the project's .ket/storage), file:///absolute/folder, or "
    "s3://bucket[/prefix][?endpoint_url=https://host:port&region=NAME]"
)
S3_PARAMETERS = ("endpoint_url", "region")
# S3 bucket names: 3 to 63 lower-case letters, digits, dots and hyphens, alphanumeric at the ends
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_REGION = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CREDENTIALS = re.compile(r"(?<=//)[^/?#]*@")  # user:password@, even where the URL won't parse
_CARRIERS = frozenset("@?#")  # what lets a URL carry a secret: credentials, a query, a fragment


@dataclass(frozen=True, kw_only=True)
class LocalLocation:
    """Files under `root`; None is the project's `.ket/storage`."""

    root: Path | None


@dataclass(frozen=True, kw_only=True)
class S3Location:
    """Objects `<prefix>/<tenant>/<key>` in an S3-compatible bucket."""

    bucket: str
    prefix: str
    endpoint_url: str | None
    region: str | None


def blobs_from_environ(environ: Mapping[str, str] = os.environ) -> BlobStore:
    """The backend KET_STORAGE_URL names (the project's `.ket/storage` when it is unset)."""
    return blobs_from_url(environ.get(STORAGE_URL_VARIABLE))


def blobs_from_url(url: str | None) -> BlobStore:
    """The backend a storage URL names (see the module docstring); StorageError when the URL
    is malformed or names S3 without `ket-jobs[s3]` installed."""
    location = parse_storage_url(url)
    if isinstance(location, LocalLocation):
        return LocalBlobs(location.root or default_storage_root())
    from ket.storage.s3 import S3Blobs  # only S3 users load it

    return S3Blobs(location)


def parse_storage_url(url: str | None) -> LocalLocation | S3Location:
    """What a storage URL says, checked whole; StorageError naming the URL (masked)."""
    if url is None or url == "":
        return LocalLocation(root=None)
    if not isinstance(url, str):
        raise StorageError(f"a storage URL must be a string, got {type(url).__name__}")
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise _malformed(url, str(error)) from None
    if parts.fragment or url.endswith("#"):
        raise _malformed(url, "a fragment (#...) means nothing here")
    if parts.scheme == "file":
        return _local(url, parts.netloc, parts.path, parts.query)
    if parts.scheme == "s3":
        return _s3(url, parts.netloc, parts.path, parts.query)
    raise StorageError(f"unknown storage URL {shown(url)!r}; expected {FORMS}")


def _local(url: str, host: str, path: str, query: str) -> LocalLocation:
    if host not in ("", "localhost"):
        raise _malformed(url, f"a file URL names a folder on this host, not on {host!r}")
    if query:
        raise _malformed(url, "a file URL takes no parameters")
    if not path:
        return LocalLocation(root=None)
    folder = unquote(path)
    if not folder.startswith("/"):
        raise _malformed(url, "the folder must be absolute: file:///absolute/folder")
    if "\x00" in folder:
        raise _malformed(url, "the folder contains NUL")
    return LocalLocation(root=Path(folder))


def _s3(url: str, netloc: str, path: str, query: str) -> S3Location:
    if "@" in netloc:
        raise _malformed(
            url,
            "credentials do not go in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or AWS_PROFILE) in the environment",
        )
    if not _BUCKET.fullmatch(netloc):
        raise _malformed(
            url, "the bucket must be 3 to 63 lower-case letters, digits, dots or hyphens"
        )
    prefix = path.strip("/")
    problem = key_problem(prefix) if prefix else None
    if problem is None and "//" in path:
        problem = "empty segments are refused"
    if problem is not None:
        raise _malformed(url, f"the prefix {prefix!r} is not a plain path: {problem}")
    options = _parameters(url, query)
    endpoint = options.get("endpoint_url")
    if endpoint is not None:
        _check_endpoint(url, endpoint)
    region = options.get("region")
    if region is not None and not _REGION.fullmatch(region):
        raise _malformed(url, f"region {region!r} is not a region name")
    return S3Location(bucket=netloc, prefix=prefix, endpoint_url=endpoint, region=region)


def _parameters(url: str, query: str) -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise _malformed(url, "its parameters are not name=value pairs joined by '&'") from None
    for name, value in pairs:
        if name not in S3_PARAMETERS:
            raise _malformed(
                url, f"unknown parameter {name!r}; expected {' or '.join(S3_PARAMETERS)}"
            )
        if name in found:
            raise _malformed(url, f"parameter {name!r} is given twice")
        if not value:
            raise _malformed(url, f"parameter {name!r} is empty")
        found[name] = value
    return found


def _check_endpoint(url: str, endpoint: str) -> None:
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 -- raises on a port that is not a number in range
    except ValueError as error:
        raise _malformed(url, f"endpoint_url does not parse ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _malformed(url, "endpoint_url must be http://host[:port] or https://host[:port]")
    if "@" in parts.netloc:
        raise _malformed(url, "credentials do not go in endpoint_url")
    if parts.query or parts.fragment:
        raise _malformed(url, "endpoint_url takes no query or fragment")


def _malformed(url: str, problem: str) -> StorageError:
    return StorageError(f"malformed storage URL {shown(url)!r}: {problem}; expected {FORMS}")


def shown(url: str) -> str:
    """`url` as it may be printed: credentials, a fragment, and every parameter value that is not
    a known setting or carries credentials, a query or a fragment of its own masked, even when
    the URL does not parse."""
    base, mark, query = url.partition("?")
    base = _CREDENTIALS.sub("***@", base.partition("#")[0]) + ("#***" if "#" in base else "")
    if not mark:
        return base
    query, hash_mark, _ = query.partition("#")
    pairs = []
    for pair in query.split("&"):
        name, equals, value = pair.partition("=")
        # an endpoint_url may carry a signature or a token in a query of its own, encoded or not
        known = unquote(name) in S3_PARAMETERS and not _CARRIERS & set(unquote(value))
        pairs.append(f"{name}{equals}{value if known or not equals else '***'}")
    return f"{base}?{'&'.join(pairs)}" + ("#***" if hash_mark else "")
