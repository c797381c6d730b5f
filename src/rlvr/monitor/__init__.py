"""What is seen: metric sinks, anomaly detectors, the HTML report."""
