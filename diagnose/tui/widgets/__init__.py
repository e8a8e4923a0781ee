"""Small widgets, each named for what it shows and fed one frozen view-model via ``show()``."""
