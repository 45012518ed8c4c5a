"""Where blobs live: the BlobStore protocol and its backends, chosen by KET_STORAGE_URL.

`ctx.storage` (ket.context.storage) checks effects, keys (ket.storage.key) and the size cap,
then hands each call to one BlobStore: LocalBlobs (files under a folder, the default) or S3Blobs
(an S3-compatible bucket, with `ket-jobs[s3]`), chosen by `blobs_from_url(KET_STORAGE_URL)`. A room
of its own, as transport is: backends know tenants, keys and bytes, never jobs or effects.
"""

from ket.storage.blobs import BlobStore
from ket.storage.key import key_problem
from ket.storage.local import LocalBlobs, default_storage_root
from ket.storage.url import (
    STORAGE_URL_VARIABLE,
    LocalLocation,
    S3Location,
    blobs_from_environ,
    blobs_from_url,
    parse_storage_url,
)

__all__ = [
    "STORAGE_URL_VARIABLE",
    "BlobStore",
    "LocalBlobs",
    "LocalLocation",
    "S3Location",
    "blobs_from_environ",
    "blobs_from_url",
    "default_storage_root",
    "key_problem",
    "parse_storage_url",
]
