"""Use cases of the service: what the API routes and the dashboard call."""
