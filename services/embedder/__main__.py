"""engram embedder service."""

from services.embedder.app import create_app
from services.embedder.settings import EmbedderSettings
from shared.serve import serve

if __name__ == "__main__":
    settings = EmbedderSettings()
    serve(create_app(settings), settings, port=settings.embedder_port)
