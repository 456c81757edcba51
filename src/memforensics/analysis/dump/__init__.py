"""A dump as read from disk: safe loading, the snapshot model and its shapes, devices, frames."""
