"""What is kept: the run's layout, the trajectory store (Parquet), object I/O, failure mining and exports."""
from rlvr.store import objects
from rlvr.store.episodes import EpisodeStore, open_run
from rlvr.store.layout import RunLayout
from rlvr.store.schema import SCHEMA, STORE_SCHEMA_VERSION, episode_to_row, row_to_episode
from rlvr.store.storage import Storage

__all__ = ["SCHEMA", "STORE_SCHEMA_VERSION", "EpisodeStore", "RunLayout", "Storage", "episode_to_row",
           "objects",
           "open_run", "row_to_episode"]
