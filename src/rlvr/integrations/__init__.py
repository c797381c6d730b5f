"""Adapters that expose rlvr domains and verifiers to other frameworks."""
