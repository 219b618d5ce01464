"""Authentication and authorization, pure (no I/O): SCRAM (RFC 5802/7677) and PLAIN SASL
exchanges, principals, and ACL matching. Used by ``flux.cluster`` (the Kafka listener, the HTTP
API) and ``flux.controller`` (credentials and ACLs in the metadata log)."""
