import os
from pathlib import Path

CACHE_DIR = Path("~/.cache/harbor").expanduser()
TASK_CACHE_DIR = CACHE_DIR / "tasks"
PACKAGE_CACHE_DIR = CACHE_DIR / "tasks" / "packages"
DATASET_CACHE_DIR = CACHE_DIR / "datasets"
NOTIFICATIONS_PATH = CACHE_DIR / "notifications.json"
DEFAULT_REGISTRY_URL = (
    "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json"
)
DEFAULT_HARBOR_REGISTRY_WEBSITE_URL = "https://hub.harborframework.com"
HARBOR_REGISTRY_WEBSITE_URL = os.environ.get(
    "HARBOR_REGISTRY_WEBSITE_URL", DEFAULT_HARBOR_REGISTRY_WEBSITE_URL
)
HARBOR_REGISTRY_TASKS_URL = f"{HARBOR_REGISTRY_WEBSITE_URL}/tasks"
HARBOR_REGISTRY_DATASETS_URL = f"{HARBOR_REGISTRY_WEBSITE_URL}/datasets"
# The viewer (jobs/trials UI) and the registry are served from the same
# Next.js app on the same domain.
HARBOR_VIEWER_WEBSITE_URL = HARBOR_REGISTRY_WEBSITE_URL
HARBOR_VIEWER_JOBS_URL = f"{HARBOR_VIEWER_WEBSITE_URL}/jobs"
# Where a user claims their Harbor username (and thereby gets a personal org).
# Surfaced when an unclaimed user tries to upload a job (which is now
# organization-owned and defaults to the caller's personal org).
HARBOR_CLAIM_USERNAME_URL = f"{HARBOR_REGISTRY_WEBSITE_URL}/onboarding/username"
ARCHIVE_FILENAME = "dist.tar.gz"
ORG_NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$"
# Name of the Docker Compose service that runs the agent. Artifact entries and
# verifier collect hooks without an explicit service target this one.
MAIN_SERVICE_NAME = "main"
