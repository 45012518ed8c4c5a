"""S3Blobs: blobs as objects `<prefix>/<tenant>/<key>` in an S3-compatible bucket (`ket-jobs[s3]`).

Built on obstore (Python bindings of the Rust `object_store` crate): one small wheel with no
dependencies, and a put that is atomic by contract. Its blocking calls run in the event loop's
default executor (see `S3Blobs._call` for why not its async ones), so the loop never waits.
Every put is a single PUT request (never a multipart upload, which could leave parts
behind when it fails): S3 stores the whole object or nothing, so a reader sees the old blob or the
new one, and a failed put leaves no partial object. One PUT takes up to 5 GiB, far above the
default size cap.

Credentials come from the standard AWS environment, as obstore reads it: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN; web identity (AWS_WEB_IDENTITY_TOKEN_FILE with
AWS_ROLE_ARN); ECS and EKS container credentials; the EC2 instance metadata service. With
AWS_PROFILE set, the profile is read from the AWS config files through boto3 (installed
separately). They are never part of the URL, a message or a log line.

Unlike the local backend, a key can be both a blob and a "folder" of other keys here (`a` and
`a/b` are separate objects): S3 has no folders.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ket.errors import BlobRejected, StorageError, StorageKeyError
from ket.storage.key import key_problem

if TYPE_CHECKING:
    from ket.storage.url import S3Location

INSTALL = "pip install 'ket-jobs[s3]'"
MAX_OBJECT_NAME_BYTES = 1_024  # the longest object name S3 takes, in UTF-8
MAX_PUT_BYTES = 5 * 1024**3  # the largest object one PUT request may carry
_MESSAGE_CAP = 500
_T = TypeVar("_T")


class S3Blobs:
    """Blobs in an S3-compatible bucket, each tenant under `<prefix>/<tenant>/`."""

    def __init__(self, location: S3Location) -> None:
        try:
            import obstore
            from obstore.store import S3Store
        except ImportError:
            raise StorageError(
                f"KET_STORAGE_URL names S3 storage, which needs obstore: {INSTALL}"
            ) from None
        self._obstore = obstore
        self._location = location
        self._prefix_bytes = len(location.prefix.encode()) + 1 if location.prefix else 0
        config: dict[str, Any] = {}
        if location.endpoint_url is not None:
            config["endpoint"] = location.endpoint_url
        if location.region is not None:
            config["region"] = location.region
        # object_store refuses plain HTTP unless told: a local S3 server (MinIO, moto) is http
        plain_http = (location.endpoint_url or "").startswith("http://")
        try:
            self._store = S3Store(
                location.bucket,
                prefix=location.prefix or None,
                config=config,  # type: ignore[arg-type]
                client_options={"allow_http": True} if plain_http else None,
                credential_provider=_profile_credentials(),
            )
        except obstore.exceptions.BaseError as error:
            raise StorageError(f"cannot use {self!r}: {_first_line(error)}") from None

    async def blob_put(self, tenant: str, key: str, data: bytes) -> None:
        name = self._object(tenant, key)
        if len(data) > MAX_PUT_BYTES:
            raise BlobRejected(
                f"storage key {key!r}: the blob is {len(data)} bytes, more than the "
                f"{MAX_PUT_BYTES} one S3 PUT takes; nothing was written"
            )
        try:
            # one PUT: whole or nothing (a multipart upload could leave parts behind)
            await self._call(self._obstore.put, self._store, name, data, use_multipart=False)
        except (FileNotFoundError, self._obstore.exceptions.BaseError) as error:
            raise self._failed("put", key, error) from None

    async def blob_get(self, tenant: str, key: str) -> bytes | None:
        name = self._object(tenant, key)
        try:
            return await self._call(_get_bytes, self._obstore, self._store, name)
        except FileNotFoundError as error:
            if _no_bucket(error):
                raise self._failed("get", key, error) from None
            return None
        except self._obstore.exceptions.BaseError as error:
            raise self._failed("get", key, error) from None

    async def blob_delete(self, tenant: str, key: str) -> bool:
        # S3 deletes a missing object without a word: ask first, to say whether there was one
        name = self._object(tenant, key)
        try:
            await self._call(self._obstore.head, self._store, name)
        except FileNotFoundError as error:
            if _no_bucket(error):
                raise self._failed("delete", key, error) from None
            return False
        except self._obstore.exceptions.BaseError as error:
            raise self._failed("delete", key, error) from None
        try:
            await self._call(self._obstore.delete, self._store, name)
        except FileNotFoundError:
            return False
        except self._obstore.exceptions.BaseError as error:
            raise self._failed("delete", key, error) from None
        return True

    async def blob_list(self, tenant: str, prefix: str) -> list[str]:
        # object_store lists whole path segments: ask for the prefix's folder, then keep the
        # keys that start with the prefix (as the local backend does)
        start, _, _ = prefix.rpartition("/")
        folder = f"{tenant}/{start}" if start else tenant
        own = f"{tenant}/"
        keys: list[str] = []
        try:
            for meta in await self._call(_list_all, self._obstore, self._store, folder):
                path = meta["path"]
                if not path.startswith(own):
                    continue
                key = path[len(own) :]
                # objects ket did not write (a "folder/" marker, an unsafe name) are no keys
                if key.startswith(prefix) and key_problem(key) is None:
                    if meta["size"] == 0 and not await self._exists(path):
                        continue
                    keys.append(key)
        except (FileNotFoundError, self._obstore.exceptions.BaseError) as error:
            raise self._failed("list", prefix, error, what="prefix") from None
        return sorted(keys)

    async def _exists(self, name: str) -> bool:
        """Whether an object is named exactly `name`: object_store lists a "folder" marker
        (`dir/`, an empty object a console makes) as `dir`, which names no object."""
        try:
            await self._call(self._obstore.head, self._store, name)
        except FileNotFoundError:
            return False
        return True

    @staticmethod
    async def _call(call: Callable[..., _T], *args: Any, **options: Any) -> _T:
        """`call`, one of obstore's blocking calls, in a thread of the loop's default executor.

        Not obstore's `*_async` calls: those finish on obstore's own Rust threads, which then
        take the GIL to hand the result over. A process that exits right after (`ket call`) could
        be finalising Python at that moment, and Python aborts it (SIGABRT). A blocking call
        hands its result over in the thread that made it, so no Rust thread touches Python.
        """
        return await asyncio.to_thread(call, *args, **options)

    def _object(self, tenant: str, key: str) -> str:
        """The object name of `key`, below the store's prefix; refused when S3 cannot hold it."""
        name = f"{tenant}/{key}"
        size = self._prefix_bytes + len(name.encode())
        if size > MAX_OBJECT_NAME_BYTES:
            raise StorageKeyError(
                f"storage key {key!r} is not allowed: with the bucket prefix and the tenant it "
                f"makes an object name of {size} bytes, more than the {MAX_OBJECT_NAME_BYTES} "
                "S3 takes"
            )
        return name

    def _failed(self, call: str, key: str, error: BaseException, what: str = "key") -> StorageError:
        return StorageError(
            f"storage {what} {key!r}: {call} on {self!r} failed: {_first_line(error)}"
        )

    def __repr__(self) -> str:
        location = self._location
        where = f"s3://{location.bucket}/{location.prefix}".rstrip("/")
        settings = (("endpoint_url", location.endpoint_url), ("region", location.region))
        options = "".join(f", {name}={value!r}" for name, value in settings if value is not None)
        return f"S3Blobs({where!r}{options})"


def _get_bytes(obstore: Any, store: Any, name: str) -> bytes:
    return bytes(obstore.get(store, name).bytes())


def _list_all(obstore: Any, store: Any, folder: str) -> list[Any]:
    return [meta for batch in obstore.list(store, folder) for meta in batch]


def _profile_credentials() -> Any:
    """A boto3 credential provider for the profile AWS_PROFILE names; None without one (obstore
    then reads the environment itself)."""
    profile = os.environ.get("AWS_PROFILE")
    if not profile:
        return None
    try:
        boto3 = importlib.import_module("boto3")  # untyped: only its Session is used
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:
        raise StorageError(
            f"AWS_PROFILE={profile!r} is set, and reading a profile from the AWS config files "
            "needs boto3: pip install boto3 (or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "instead)"
        ) from None
    try:
        return Boto3CredentialProvider(boto3.Session(profile_name=profile))
    except Exception as error:  # botocore's: no such profile, no credentials in it
        raise StorageError(
            f"AWS_PROFILE={profile!r} gives no credentials: {_first_line(error)}"
        ) from None


def _no_bucket(error: BaseException) -> bool:
    """A "not found" that is about the bucket, not the object: a misconfiguration, not a
    missing blob. (A HEAD answers without a body, so a missing bucket looks like a missing
    object there; the next put or list says it.)"""
    return "NoSuchBucket" in str(error)


def _first_line(error: BaseException) -> str:
    """The first line of an error: obstore's go on with a debug dump of the request."""
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= _MESSAGE_CAP else text[: _MESSAGE_CAP - 3] + "..."
