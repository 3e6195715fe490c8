"""The desk's date and time formats (``FORMAT_MODULE_PATH``): one form on every page."""
