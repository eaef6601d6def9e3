"""Stand-ins for the server that the client is measured and tested against."""
