"""A deterministic asyncio runtime: virtual time, explorable schedules, exact replay."""
