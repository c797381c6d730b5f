"""The `sql` domain: queries for business questions and migrations that keep data and constraints, on a real
PostgreSQL server started inside the sandbox from the image's template cluster, judged on the visible data and
on fresh data of the same schema; multi-turn tasks get a bash terminal with psql."""
from rlvr.domains.sql.source import SqlConfig, SqlSettings, SqlSource
from rlvr.domains.sql.verifier import SqlVerifier
from rlvr.envs.tools import BASH
from rlvr.tasks.domain import Domain, VerifierKind

DOMAIN = Domain("sql", SqlSource, SqlConfig, verifiers={"sql": VerifierKind(SqlVerifier, SqlSettings)},
                tools=(BASH,),
                description="SQL queries and migrations on a real PostgreSQL server, judged on visible and "
                            "fresh data (tiers easy..hard).")
