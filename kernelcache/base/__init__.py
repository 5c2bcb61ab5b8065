"""The ground floor: errors, the spec, settings, the cache's spellings and formats, outcome words
and events, records, process-wide memos, the one stat rule and import-path stamps. Imports nothing
else of kernelcache.
"""
