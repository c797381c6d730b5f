"""The inference side: Policy protocol and backends, the rollout engine, Episode records."""
