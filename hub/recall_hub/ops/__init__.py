"""Domain operations, transport-free: each takes the hub context, the caller and a request model."""
