"""Principals and ACLs (`authorizer`); TLS credentials are in `services.common.tls`."""
