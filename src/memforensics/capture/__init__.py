"""What runs inside training: the facade, config, recording, OOM capture, dumps and the journal."""
