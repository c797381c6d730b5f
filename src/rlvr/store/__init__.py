"""What is kept: the trajectory store (Parquet), checkpoints, failure mining and exports."""
