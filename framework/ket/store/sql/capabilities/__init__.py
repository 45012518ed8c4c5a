"""SqlStore's parts: a session and one class per capability of the store contract (see
ket.store.sql.store, which puts them together)."""
