"""The consumer-group demo: real coordinator, consumer and producer processes on the embedded log."""
