"""What filled the device: lifetimes, kinds of memory, the peak and its call tree."""
