"""The summary of one dump: what filled the device and the verdict, with its words."""
