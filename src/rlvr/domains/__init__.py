"""The built-in domains, one package each: where its tasks come from, its settings, its verifier, its tools,
its gold solutions and any harness that runs in the sandbox.

Each package exposes one `rlvr.tasks.domain.Domain` record (`DOMAIN`, or a function returning several) and
declares it in the `rlvr.domains` entry-point group of rlvr's pyproject.toml, exactly as a third-party domain
does in its own (`rlvr domains new NAME` scaffolds one). Nothing here registers anything: the registry
(`rlvr.tasks.registry`) loads the entry points on the first lookup.
"""
