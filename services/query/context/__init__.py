"""Context for a message under each seed's injection policy (``POST /v1/context``)."""
