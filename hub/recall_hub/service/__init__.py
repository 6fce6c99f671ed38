"""The NATS edge: endpoints, the event consumer and the process that serves them. The only code that imports nats."""
