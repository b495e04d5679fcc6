"""The HTTP server: app factory, request schemas, scheduler, errors, metrics."""
