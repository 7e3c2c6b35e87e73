"""Authentication and authorization: SASL, TLS, the authorizer and ACLs."""
