"""The control database: the tenant registry, the worker roster, tenant databases."""
