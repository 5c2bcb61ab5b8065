"""Making an entry: compile in a private directory, ninja runs, what a failed step reports, and
the single-flight lock a build holds.
"""
