"""The reference ``ReactLoopAgent``: the agent-loop contract of ``shared/spec/agent-loop-spec.md``."""
