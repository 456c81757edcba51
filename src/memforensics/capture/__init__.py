"""What runs inside training: the facade, its configuration, recording, OOM capture, dumps and the journal."""
