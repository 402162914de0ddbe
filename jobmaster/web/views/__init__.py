"""One module per page group; each exposes ``ROUTES``."""
