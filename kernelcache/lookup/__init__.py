"""Finding and answering: the lookup loop over places, the one admission door, the loader, the
fleet stage and push, explain, and the warm recall path with what it re-checks.
"""
