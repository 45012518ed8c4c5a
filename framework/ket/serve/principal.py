"""Who calls: the principal an authenticator returns, and the request it decides on.

Pure values, without Starlette: a workspace imports them to write its authenticator, and
declaring or checking a deployment must not need the server's dependencies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

# What calling function <module>.<function> takes: `call:<module>.<function>`, granted by that
# permission itself, `call:<module>.*` or `call:*` (see Principal.allows).
CALL = "call"
# What operators hold (docs/serve.md#permissions): reading a tenant's jobs and queues, on the
# dashboard and the operator API; retrying and cancelling jobs; pausing and resuming queues;
# pausing, resuming and running schedules now.
JOBS_READ = "jobs:read"
JOBS_WRITE = "jobs:write"
QUEUES_WRITE = "queues:write"
SCHEDULES_WRITE = "schedules:write"
FLEET_READ = "fleet:read"  # every tenant's counts on the dashboard's Fleet page


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """Who a request acts for: a `subject` (for logs), the `company` its functions run for, and
    the `permissions` it holds, as `verb:object` strings.

    `call:sales.place_order` lets it call that function; `call:sales.*` every function of
    module `sales`; `call:*` every function. A principal with no permission is authenticated
    and may do nothing (403).

    >>> Principal(subject="ada", permissions={"call:sales.*"}).allows("call:sales.place_order")
    True
    """

    subject: str
    company: str | None = None
    # any set of strings ({'call:*'}, as the docs write it); kept as a frozenset
    permissions: AbstractSet[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not isinstance(self.subject, str) or not self.subject:
            raise ValueError(f"Principal subject must be a non-empty string, got {self.subject!r}")
        if self.company is not None and not isinstance(self.company, str):
            raise ValueError(f"Principal company must be a string or None, got {self.company!r}")
        given: object = self.permissions
        if isinstance(given, str) or not isinstance(given, Iterable):
            raise ValueError(
                f"Principal permissions must be a set of strings such as {{'call:*'}}, "
                f"got {given!r}"
            )
        permissions = frozenset(given)
        for permission in permissions:
            if not isinstance(permission, str) or ":" not in permission:
                raise ValueError(
                    f"a permission is 'verb:object' (e.g. 'call:sales.*'), got {permission!r}"
                )
        object.__setattr__(self, "permissions", permissions)

    def allows(self, permission: str) -> bool:
        """Whether a held permission grants `permission` (`verb:object`): the same one, or one
        of the same verb whose object is `*` or ends in `.*` over it."""
        if permission in self.permissions:
            return True
        verb, _, target = permission.partition(":")
        for held in self.permissions:
            held_verb, _, held_target = held.partition(":")
            if held_verb != verb:
                continue
            if held_target == "*":
                return True
            if held_target.endswith(".*") and target.startswith(held_target[:-1]):
                return True
        return False


@dataclass(frozen=True, kw_only=True, slots=True)
class AuthRequest:
    """What an authenticator sees of a request: the tenant it names (a valid name; whether that
    tenant is registered is checked after authentication, so that only an authenticated caller
    learns it), method, path, headers (a case-insensitive mapping, cookies included), the
    client's address, and on the dashboard the token its sign-in form stored."""

    tenant: str
    method: str
    path: str
    headers: Mapping[str, str]
    client: str | None = None
    # the token the dashboard's sign-in form keeps in its cookie, on dashboard requests only
    dashboard_token: str | None = None

    def bearer_token(self) -> str | None:
        """The token of an `Authorization: Bearer <token>` header; on a dashboard request
        without one, the token its sign-in form stored (a browser sends no such header);
        else None."""
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and token:
            return token
        return self.dashboard_token or None


Authenticate = Callable[[AuthRequest], Principal | Awaitable[Principal | None] | None]
