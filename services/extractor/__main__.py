"""engram extractor service."""

from services.extractor.app import create_app
from services.extractor.settings import ExtractorSettings
from shared.serve import serve

if __name__ == "__main__":
    settings = ExtractorSettings()
    serve(create_app(settings), settings, port=settings.extractor_port)
