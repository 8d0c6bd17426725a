"""loopkit: conformance."""
