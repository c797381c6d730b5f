"""What is kept: the trajectory store (Parquet), checkpoints, failure mining and exports."""
from rlvr.store import checkpoints
from rlvr.store.episodes import EpisodeStore, open_run
from rlvr.store.schema import SCHEMA, STORE_SCHEMA_VERSION, episode_to_row, row_to_episode
from rlvr.store.storage import Storage

__all__ = ["SCHEMA", "STORE_SCHEMA_VERSION", "EpisodeStore", "Storage", "checkpoints", "episode_to_row",
           "open_run", "row_to_episode"]
