"""What is seen: metric sinks, anomaly detectors, the HTML report."""
from rlvr.monitor.detectors import DETECTORS, Alert
from rlvr.monitor.metrics import METRICS, compute_metrics
from rlvr.monitor.monitor import Monitor
from rlvr.store.layout import ALERTS_FILE

__all__ = ["ALERTS_FILE", "DETECTORS", "METRICS", "Alert", "Monitor", "compute_metrics"]
