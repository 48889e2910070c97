"""writer_service package."""
