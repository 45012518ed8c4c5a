"""The example workspace: the deployments `ket` commands load (see [tool.ket] in pyproject.toml)."""

from ket import define_deployment
from modules_example.auth import authenticate
from modules_example.company import company
from modules_example.hotel import hotel
from modules_example.sales import sales

erp = define_deployment(
    name="erp",
    modules=[sales, hotel, company],
    worker={
        "queues": {"default": 2, "mail": 4, "maintenance": 1},
        "poll_min_ms": 50,
        "poll_max_ms": 2_000,
        "tenant_refresh_ms": 30_000,
        "lease_ms": 30_000,
        "shutdown_grace_ms": 15_000,
        "schedule_sweep_ms": 30_000,
    },
    serve={"authenticate": authenticate},
)
