"""Storage: the only code that holds Cypher and Redis keys. Every bead read takes a viewer."""
