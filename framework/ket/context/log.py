"""`ctx.log`: logging with structured fields, tagged with the running job."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ket.context.part import Part

logger = logging.getLogger("ket.handler")


class ContextLog(Part):
    """`ctx.log.info("order is gone", order_id=...)`: fields travel in `record.ket`."""

    __slots__ = ("__base", "__logger")

    def __init__(self, base: Mapping[str, Any], target: logging.Logger = logger) -> None:
        self.__base = dict(base)
        self.__logger = target

    def debug(self, message: str, **fields: Any) -> None:
        self.__log(logging.DEBUG, message, fields)

    def info(self, message: str, **fields: Any) -> None:
        self.__log(logging.INFO, message, fields)

    def warning(self, message: str, **fields: Any) -> None:
        self.__log(logging.WARNING, message, fields)

    def error(self, message: str, **fields: Any) -> None:
        self.__log(logging.ERROR, message, fields)

    def __log(self, level: int, message: str, fields: dict[str, Any]) -> None:
        if self.__logger.isEnabledFor(level):  # build nothing for a record nobody keeps
            structured = {**self.__base, **fields}
            text = " ".join(f"{k}={v}" for k, v in fields.items())
            self.__logger.log(
                level, f"{message} {text}".rstrip(), extra={"ket": structured}, stacklevel=3
            )
