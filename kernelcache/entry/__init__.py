"""What an entry holds and whether it may be used: the manifest, the packed hit record, and the
binary's validation against the spec.
"""
