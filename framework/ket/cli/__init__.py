"""The `ket` command: thin adapters over the rooms of the package; nothing imports it."""
