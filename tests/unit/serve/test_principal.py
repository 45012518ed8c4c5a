"""The principal an authenticator returns, and the request it sees."""

from __future__ import annotations

import pytest

from ket.serve import AuthRequest, Principal


@pytest.mark.parametrize(
    ("held", "wanted", "allowed"),
    [
        ({"call:sales.place_order"}, "call:sales.place_order", True),
        ({"call:sales.place_order"}, "call:sales.confirm_order", False),
        ({"call:sales.*"}, "call:sales.place_order", True),
        ({"call:sales.*"}, "call:salesforce.sync", False),
        ({"call:*"}, "call:hotel.book", True),
        ({"jobs:*"}, "call:hotel.book", False),
        ({"call:*"}, "jobs:read", False),
        (set(), "call:hotel.book", False),
    ],
)
def test_a_permission_is_granted_by_itself_or_a_wildcard_of_its_verb(
    held: set[str], wanted: str, allowed: bool
) -> None:
    assert Principal(subject="ada", permissions=held).allows(wanted) is allowed


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"subject": ""}, "subject must be a non-empty string"),
        ({"subject": "ada", "company": 7}, "company must be a string or None, got 7"),
        ({"subject": "ada", "permissions": "call:*"}, "permissions must be a set of strings"),
        ({"subject": "ada", "permissions": {"admin"}}, "a permission is 'verb:object'"),
    ],
)
def test_a_malformed_principal_is_refused_naming_the_value(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Principal(**fields)  # type: ignore[arg-type]


def test_permissions_given_as_a_list_are_kept_as_a_frozen_set() -> None:
    principal = Principal(subject="ada", permissions=["call:*"])  # type: ignore[arg-type]
    assert principal.permissions == frozenset({"call:*"})


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("", None),
    ],
)
def test_bearer_token_reads_the_authorization_header(header: str, token: str | None) -> None:
    request = AuthRequest(
        tenant="default", method="POST", path="/", headers={"authorization": header}
    )
    assert request.bearer_token() == token
