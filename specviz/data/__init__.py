"""Plain data: a Run of Rounds (and token trees), their JSON run files, and playback of a stream."""
