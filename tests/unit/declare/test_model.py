"""define_model: fields kept as written; anything but a dict fails at the call."""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_model
from ket.errors import DeclarationError

from .location import marked


def test_model_keeps_fields_as_written_as_a_copy() -> None:
    fields = {"number": "string", "id": "money"}
    model = define_model(fields)  # model-call
    fields["extra"] = "int"
    assert model.fields == {"number": "string", "id": "money"}
    assert model.source == marked("model-call", __file__)
    assert (model.module, model.name) == ("", "")


@pytest.mark.parametrize("fields", [["number"], "number:string", None])
def test_model_fields_not_a_dict_names_file_line_and_value(fields: Any) -> None:
    with pytest.raises(DeclarationError) as raised:
        define_model(fields)  # model-not-dict
    assert raised.value.message == (
        f"{marked('model-not-dict', __file__).render()}: define_model takes a dict of field "
        f"name to type, got {fields!r}"
    )
