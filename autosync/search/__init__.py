"""Offline search over synchronization policies: spaces, objectives, studies (the cache), strategies, replay."""
