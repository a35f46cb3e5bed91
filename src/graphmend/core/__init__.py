"""What the static side and the runtime share, with no import of torch."""
