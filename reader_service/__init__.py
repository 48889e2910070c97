"""reader_service package."""
