"""Scheduling: which IR nodes fuse into one kernel (``fusion.py``) and when
each buffer is allocated, reused and freed (``memory.py``)."""
