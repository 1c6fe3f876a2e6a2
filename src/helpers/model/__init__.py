"""The model: arithmetic from its configuration, and the decode-step budget."""
