"""Companies: the business units a tenant runs; hotel jobs fan out over them."""

from ket import define_model, define_module

company = define_module(
    name="company",
    models={"Company": define_model({"name": "string", "code": "string"})},
)
