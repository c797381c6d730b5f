"""The `shell` domain: terminal work in the style of Terminal-Bench (logs into reports, a broken build, git
surgery, permissions and links, a cron schedule, text at scale) in a Debian image, judged on the final files
and repositories and, where a script is the answer, on fresh inputs; multi-turn tasks get a bash terminal."""
from rlvr.domains.shell.source import ShellConfig, ShellSettings, ShellSource
from rlvr.domains.shell.verifier import ShellVerifier
from rlvr.envs.tools import BASH
from rlvr.tasks.domain import Domain, VerifierKind

DOMAIN = Domain("shell", ShellSource, ShellConfig, verifiers={"shell": VerifierKind(ShellVerifier,
                                                                                    ShellSettings)},
                tools=(BASH,),
                description="Terminal work (logs, builds, git, permissions, cron, text at scale) judged on "
                            "the "
                            "final state and fresh inputs (tiers easy..hard).")
