"""loopkit: cassettes."""
