"""HTTP routes. Thin: parse, call a service, map results to status codes."""
