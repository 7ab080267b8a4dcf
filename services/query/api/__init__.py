"""The HTTP adapters: routes, request and response models, auth, limits, errors."""
