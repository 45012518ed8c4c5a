"""Connections: URLs, engines, the connection budget, closing, poolers."""
